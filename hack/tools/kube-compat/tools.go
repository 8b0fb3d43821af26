//go:build tools

// Package tools pins the older kube-apiserver that make test-compat runs the envtest suites
// against (the oldest Kubernetes minor the chart claims; see docs/compatibility.md).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)

// Package e2e is the cluster-agnostic end-to-end suite (build tag e2e). It needs only
// KUBECONFIG and, through environment variables, where to reach what the cluster runs:
//
//	E2E_ENGINE_ADMIN      fake engine admin API (GET /engines, POST .../restart)
//	E2E_ADAPTER_METRICS   adapter-controller metrics URL
//	E2E_ROUTER_METRICS    router-controller metrics URL
//	E2E_STOP_ROUTER / E2E_START_ROUTER  shell commands that stop and start the router-controller
//	E2E_ENGINE_IMAGE      image of the model pods (kind: the fake engine image)
//	E2E_GATEWAY_NAMESPACE gateway namespace of the routes (default aibrix-system)
//
// make e2e-local sets them for the local kwok cluster, make e2e for kind.
package e2e

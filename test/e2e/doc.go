// Package e2e is the cluster-agnostic end-to-end suite (build tag e2e). It needs only
// KUBECONFIG and, through environment variables, where to reach what the cluster runs:
//
//	E2E_ENGINE_ADMIN      fake engine admin API (GET /engines, POST .../restart)
//	E2E_ADAPTER_METRICS   adapter-controller metrics URL
//	E2E_ROUTER_METRICS    router-controller metrics URL
//	E2E_RESTART_ROUTER    shell command that restarts the router-controller (default: delete
//	                      its pods in modelplane-system)
//	E2E_STOP_ROUTER / E2E_START_ROUTER  stop and start it separately (host processes)
//	E2E_GATEWAY_NAMESPACE gateway namespace of the routes (default aibrix-system)
//
// make e2e-local sets them for the local kwok cluster, make e2e for kind.
package e2e

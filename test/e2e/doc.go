// Package e2e is the cluster-agnostic end-to-end suite (build tag e2e). It needs only
// KUBECONFIG (E2E_CONTEXT names the context) and, through environment variables, where to
// reach what the cluster runs and how to inject faults there:
//
//	E2E_ENGINE_ADMIN      fake engine admin API (GET /engines, POST .../restart, .../fault):
//	                      the host-mode fake engine on kwok, the aggregator over the
//	                      in-pod admin APIs on kind (test/e2e/kind)
//	E2E_ADAPTER_METRICS   adapter-controller metrics URL (HTTPS: with E2E_METRICS_TOKEN)
//	E2E_ROUTER_METRICS    router-controller metrics URL
//	E2E_METRICS_TOKEN     bearer token of a ServiceAccount allowed GET /metrics
//	E2E_RENEW_DEADLINE    the controllers' leader election renew deadline (default 10s): an
//	                      API outage shorter than it must not end a controller
//	E2E_ADAPTER_STANDBY_METRICS / E2E_ROUTER_STANDBY_METRICS  the standbys' metrics URLs
//	E2E_STOP_*, E2E_START_*, E2E_KILL_*, E2E_ENSURE_*, E2E_*_READYZ, E2E_RESTART_APISERVER*,
//	E2E_COLLECT_LOGS, E2E_STACK, E2E_LOG_DIR
//	                      the fault hooks: commands of the cluster kind's stack script, whose
//	                      contract is hooks.txt (hack/lib.sh's e2e_hooks exports them)
//	E2E_ROLLOUT_PREVIOUS, E2E_ROLLOUT_CURRENT
//	                      commands rolling the cluster to the previous release and to the
//	                      current build, manifests, chart and controllers (TestUpgradeRollback;
//	                      make e2e-local: hack/rollout.sh)
//	E2E_LEASE_DURATION    the controllers' leader election lease duration
//	E2E_ENGINE_IMAGE      image of the model pods (kind: the fake engine image)
//	E2E_REPO_ROOT         the repository (deploy/ is read from there)
//	E2E_GATEWAY_NAMESPACE gateway namespace of the routes (default aibrix-system)
//	E2E_GATEWAY_URL       the HTTP listener of a Gateway API implementation serving the
//	                      routes' Gateway (kind: Traefik, test/e2e/kind/gateway);
//	                      E2E_GATEWAY_CONTROLLER, E2E_GATEWAY_NAME its controllerName and Gateway
//	E2E_PROMETHEUS_URL    the HTTP API of a Prometheus scraping the controllers through
//	                      deploy/prometheus (kind: Prometheus Operator, test/e2e/kind/monitoring)
//
// make e2e-local sets them for the local kwok cluster (hack/e2e-local.sh, hack/stack.sh),
// make e2e for kind (hack/e2e-kind.sh, hack/e2e-kind-stack.sh). A test skips only where a
// variable is missing, and says which; the run lists every skip at the end and fails on one
// that skips/<cluster kind>.txt does not expect (skipcheck).
package e2e

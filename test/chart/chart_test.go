package chart_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/loraplane/loraplane/test/testenv"
)

const (
	chartDir  = "deploy/chart/loraplane"
	release   = "loraplane"
	namespace = "loraplane-system"
	hookKey   = "helm.sh/hook"
)

// helmLabels are the labels the chart adds for Helm (loraplane.helmLabels), and
// helmAnnotations the annotations that only instruct Helm (the release namespace's
// resource policy): the only differences the comparison with deploy/default ignores.
var (
	helmLabels      = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}
	helmAnnotations = []string{"helm.sh/resource-policy"}
)

type object = map[string]any

// tool returns the path of a pinned tool in bin/; without it the test fails (make test
// builds it), or skips under -short (make test-unit builds no tools).
func tool(t *testing.T, root, name string) string {
	t.Helper()
	p := filepath.Join(root, "bin", name)
	if _, err := os.Stat(p); err != nil {
		if testing.Short() {
			t.Skipf("%s is not built (make tools builds it)", p)
		}
		t.Fatalf("%s is not built: run make tools (%v)", p, err)
	}
	return p
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// run runs a command in the repository root and decodes its YAML output into objects.
func run(t *testing.T, root, name string, args ...string) []object {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	objs, err := decode(stdout.Bytes())
	if err != nil {
		t.Fatalf("decoding the output of %s %s: %v", filepath.Base(name), strings.Join(args, " "), err)
	}
	return objs
}

func decode(data []byte) ([]object, error) {
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []object
	for {
		var o object
		err := d.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(o) > 0 {
			out = append(out, o)
		}
	}
}

func str(o object, path ...string) string {
	v, _ := get(o, path...).(string)
	return v
}

func get(o any, path ...string) any {
	for _, p := range path {
		m, ok := o.(map[string]any)
		if !ok {
			return nil
		}
		o = m[p]
	}
	return o
}

func key(o object) string {
	return fmt.Sprintf("%s %s %s/%s", str(o, "apiVersion"), str(o, "kind"), str(o, "metadata", "namespace"), str(o, "metadata", "name"))
}

// withoutHelmMetadata returns o without Helm's own labels and annotations (and without a
// labels or annotations map left empty).
func withoutHelmMetadata(o object) object {
	meta, _ := o["metadata"].(map[string]any)
	for field, keys := range map[string][]string{"labels": helmLabels, "annotations": helmAnnotations} {
		m, _ := meta[field].(map[string]any)
		for _, k := range keys {
			delete(m, k)
		}
		if m != nil && len(m) == 0 {
			delete(meta, field)
		}
	}
	return o
}

// hooks splits the Helm hooks (objects that exist only while Helm runs a hook) from the
// release's objects.
func hooks(objs []object) (release, hooks []object) {
	for _, o := range objs {
		if str(o, "metadata", "annotations", hookKey) != "" {
			hooks = append(hooks, o)
		} else {
			release = append(release, o)
		}
	}
	return release, hooks
}

func byKey(objs []object) map[string]object {
	out := map[string]object{}
	for _, o := range objs {
		out[key(o)] = o
	}
	return out
}

func keys(m map[string]object) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func helmTemplate(t *testing.T, root string, extra ...string) []object {
	t.Helper()
	args := append([]string{"template", release, chartDir, "--namespace", namespace, "--include-crds"}, extra...)
	return run(t, root, tool(t, root, "helm"), args...)
}

// TestChartDefaultsMatchKustomize: the chart with its default values renders every object of
// deploy/default but its Namespace (the chart leaves the release namespace alone unless
// namespace.create), and nothing else, each equal field by field once Helm's labels are
// removed; with namespace.create it renders that Namespace too. By default there is no hook:
// helm uninstall deletes no ModelAdapter.
func TestChartDefaultsMatchKustomize(t *testing.T) {
	root := repoRoot(t)
	kustomized := byKey(run(t, root, tool(t, root, "kubectl"), "kustomize", "deploy/default"))
	if len(kustomized) == 0 {
		t.Fatal("kubectl kustomize deploy/default rendered nothing")
	}
	const nsKey = "v1 Namespace /" + namespace
	for _, variant := range []struct {
		args     []string
		wantNsKs bool
	}{{nil, false}, {[]string{"--set", "namespace.create=true"}, true}} {
		objs, hookObjs := hooks(helmTemplate(t, root, variant.args...))
		if len(hookObjs) > 0 {
			t.Errorf("%v: the chart renders hooks by default: %v", variant.args, keys(byKey(hookObjs)))
		}
		chart := map[string]object{}
		for _, o := range objs {
			k := key(o)
			if _, dup := chart[k]; dup {
				t.Errorf("the chart renders %s twice", k)
			}
			if kind := str(o, "kind"); (kind == "Namespace" || kind == "CustomResourceDefinition") &&
				str(o, "metadata", "annotations", "helm.sh/resource-policy") != "keep" {
				t.Errorf("%s would be deleted by helm uninstall: want helm.sh/resource-policy: keep", k)
			}
			chart[k] = withoutHelmMetadata(o)
		}
		for _, k := range keys(kustomized) {
			c, ok := chart[k]
			if !ok {
				if k != nsKey || variant.wantNsKs {
					t.Errorf("%v: deploy/default has %s; the chart does not render it", variant.args, k)
				}
				continue
			}
			if diff := cmp.Diff(kustomized[k], c); diff != "" {
				t.Errorf("%v: %s differs (-deploy/default +chart):\n%s", variant.args, k, diff)
			}
		}
		for _, k := range keys(chart) {
			if _, ok := kustomized[k]; !ok {
				t.Errorf("%v: the chart renders %s; deploy/default does not have it", variant.args, k)
			}
		}
		if _, ok := chart[nsKey]; ok != variant.wantNsKs {
			t.Errorf("%v: the release namespace rendered: %v, want %v", variant.args, ok, variant.wantNsKs)
		}
	}
	t.Logf("%d objects compared", len(kustomized))
}

// TestChartUninstallKeepsUserData: by default helm uninstall keeps the CRD (resource policy
// keep) and runs no cleanup hook, so every ModelAdapter stays; cleanupOnUninstall is the
// opt-in that renders the hook; crds.keep=false and crds.enabled=false do what they say.
func TestChartUninstallKeepsUserData(t *testing.T) {
	root := repoRoot(t)
	const crdKey = "apiextensions.k8s.io/v1 CustomResourceDefinition /modeladapters.model.aibrix.ai"
	objs, hookObjs := hooks(helmTemplate(t, root))
	crd, ok := byKey(objs)[crdKey]
	if !ok || str(crd, "metadata", "annotations", "helm.sh/resource-policy") != "keep" || len(hookObjs) != 0 {
		t.Errorf("defaults: CRD rendered %v with resource policy %q, %d hook objects; want it kept and no hook",
			ok, str(crd, "metadata", "annotations", "helm.sh/resource-policy"), len(hookObjs))
	}

	_, hookObjs = hooks(helmTemplate(t, root, "--set", "adapterController.cleanupOnUninstall.enabled=true"))
	var gotHooks []string
	for _, o := range hookObjs {
		gotHooks = append(gotHooks, key(o)+" "+str(o, "metadata", "annotations", hookKey))
	}
	sort.Strings(gotHooks)
	wantHooks := []string{
		"batch/v1 Job loraplane-system/loraplane-adapter-cleanup pre-delete",
		"rbac.authorization.k8s.io/v1 ClusterRole /loraplane-adapter-cleanup pre-delete",
		"rbac.authorization.k8s.io/v1 ClusterRoleBinding /loraplane-adapter-cleanup pre-delete",
		"v1 ServiceAccount loraplane-system/loraplane-adapter-cleanup pre-delete",
	}
	if diff := cmp.Diff(wantHooks, gotHooks); diff != "" {
		t.Errorf("cleanupOnUninstall.enabled=true: hooks (-want +got):\n%s", diff)
	}

	crd = byKey(helmTemplate(t, root, "--set", "crds.keep=false"))[crdKey]
	if crd == nil || str(crd, "metadata", "annotations", "helm.sh/resource-policy") != "" {
		t.Errorf("crds.keep=false: CRD %v, want it rendered without the keep policy", get(crd, "metadata"))
	}
	if _, ok := byKey(helmTemplate(t, root, "--set", "crds.enabled=false"))[crdKey]; ok {
		t.Error("crds.enabled=false still renders the CRD")
	}
}

// container returns the first container of a Deployment or Job.
func container(t *testing.T, o object) map[string]any {
	t.Helper()
	cs, _ := get(o, "spec", "template", "spec", "containers").([]any)
	if len(cs) == 0 {
		t.Fatalf("%s has no container", key(o))
	}
	return cs[0].(map[string]any)
}

func args(t *testing.T, o object) []string {
	t.Helper()
	var out []string
	for _, a := range container(t, o)["args"].([]any) {
		out = append(out, a.(string))
	}
	return out
}

// TestChartFullValues: ci/full-values.yaml sets every value; each shows where it should.
func TestChartFullValues(t *testing.T) {
	root := repoRoot(t)
	objs := byKey(helmTemplate(t, root, "-f", filepath.Join(chartDir, "ci", "full-values.yaml")))
	var values struct {
		AdapterController, RouterController struct {
			Flags map[string]any `json:"flags"`
		}
	}
	data, err := os.ReadFile(filepath.Join(root, chartDir, "ci", "full-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	must := func(k string) object {
		t.Helper()
		o, ok := objs[k]
		if !ok {
			t.Fatalf("%s is not rendered; rendered: %v", k, keys(objs))
		}
		return o
	}

	deployments := map[string]struct {
		flags map[string]any
		image string
	}{
		"adapter-controller": {values.AdapterController.Flags, "registry.example.com/mirror/adapter-controller:v9.9.8@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
		"router-controller":  {values.RouterController.Flags, "registry.example.com/platform/router-controller:v9.9.9@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"},
	}
	for name, want := range deployments {
		d := must("apps/v1 Deployment loraplane-system/" + name)
		got := args(t, d)
		if len(want.flags) < 20 {
			t.Errorf("%s: only %d flags in full-values.yaml", name, len(want.flags))
		}
		for flag, v := range want.flags {
			if s := fmt.Sprint(v); s != "" && !slices.ContainsFunc(got, func(a string) bool { return a == "--"+flag || strings.HasPrefix(a, "--"+flag+"=") }) {
				t.Errorf("%s: flag %s=%v is not in the arguments %v", name, flag, v, got)
			}
		}
		if !slices.Contains(got, "--watch-namespace=team-a,team-b") {
			t.Errorf("%s: no --watch-namespace=team-a,team-b in %v", name, got)
		}
		if img := container(t, d)["image"]; img != want.image {
			t.Errorf("%s: image %v, want %s", name, img, want.image)
		}
		for _, field := range []string{"nodeSelector", "tolerations", "topologySpreadConstraints", "priorityClassName", "imagePullSecrets"} {
			if get(d, "spec", "template", "spec", field) == nil {
				t.Errorf("%s: pod spec has no %s", name, field)
			}
		}
		if get(d, "spec", "replicas") != float64(3) {
			t.Errorf("%s: replicas %v, want 3", name, get(d, "spec", "replicas"))
		}
		must("policy/v1 PodDisruptionBudget loraplane-system/" + name)
		must("monitoring.coreos.com/v1 ServiceMonitor loraplane-system/" + name)
		must("networking.k8s.io/v1 NetworkPolicy loraplane-system/" + name)
		// Namespaced install: Roles in the watched namespaces, named after the release.
		for _, ns := range []string{"team-a", "team-b"} {
			must("rbac.authorization.k8s.io/v1 Role " + ns + "/platform-loraplane-" + name)
			must("rbac.authorization.k8s.io/v1 RoleBinding " + ns + "/platform-loraplane-" + name)
		}
		podValues(t, objs, name, d)
	}
	if got := args(t, must("apps/v1 Deployment loraplane-system/adapter-controller")); !slices.Contains(got, "--aibrix-controller-leases=") {
		t.Errorf("adapter-controller: extraArgs missing from %v", got)
	}
	must("rbac.authorization.k8s.io/v1 Role gateways/platform-loraplane-router-controller")
	must("rbac.authorization.k8s.io/v1 ClusterRole /platform-loraplane-adapter-controller")
	must("rbac.authorization.k8s.io/v1 ClusterRoleBinding /platform-loraplane-router-controller-binding")
	if str(must("v1 Namespace /loraplane-system"), "metadata", "labels", "pod-security.kubernetes.io/enforce") != "restricted" {
		t.Error("namespace.create=true: the release namespace lacks the Pod Security label")
	}
	crd := must("apiextensions.k8s.io/v1 CustomResourceDefinition /modeladapters.model.aibrix.ai")
	if p := str(crd, "metadata", "annotations", "helm.sh/resource-policy"); p != "" {
		t.Errorf("crds.keep=false: the CRD has resource policy %q", p)
	}
	cert := must("cert-manager.io/v1 Certificate loraplane-system/loraplane-metrics")
	if str(cert, "spec", "secretName") != "loraplane-metrics-tls" || str(cert, "spec", "issuerRef", "name") != "platform-ca" {
		t.Errorf("Certificate: %v", cert["spec"])
	}
	rb := must("rbac.authorization.k8s.io/v1 RoleBinding loraplane-system/loraplane-prometheus-discovery")
	if got := fmt.Sprint(get(rb, "subjects")); !strings.Contains(got, "name:prometheus namespace:observability") {
		t.Errorf("Prometheus discovery subjects %s", got)
	}
	np := fmt.Sprint(must("networking.k8s.io/v1 NetworkPolicy loraplane-system/adapter-controller")["spec"])
	for _, want := range []string{"cidr:198.18.0.1/32", "port:6443", "port:30000", "port:53", "kubernetes.io/metadata.name:observability"} {
		if !strings.Contains(np, want) {
			t.Errorf("adapter-controller NetworkPolicy lacks %q: %s", want, np)
		}
	}
	if str(must("v1 Namespace /gateways"), "metadata", "annotations", "helm.sh/resource-policy") != "keep" {
		t.Error("the gateway namespace is not kept on uninstall")
	}
	must("monitoring.coreos.com/v1 PrometheusRule loraplane-system/loraplane")
	sm := must("monitoring.coreos.com/v1 ServiceMonitor loraplane-system/adapter-controller")
	if got := get(sm, "spec", "endpoints"); !strings.Contains(fmt.Sprint(got), "prometheus-loraplane-token") {
		t.Errorf("the adapter-controller ServiceMonitor does not authorize with the Secret: %v", got)
	}

	// No ClusterRole grants anything in a namespace: only the cluster-scoped reviews the
	// secure metrics need, the metrics reader's non-resource URL, and get on AIBrix's
	// controller Leases by name (in AIBrix's namespace, which is not watched).
	for k, o := range objs {
		if str(o, "kind") != "ClusterRole" {
			continue
		}
		rules, _ := o["rules"].([]any)
		for _, r := range rules {
			groups := fmt.Sprint(get(r, "apiGroups"))
			aibrixLeases := groups == "[coordination.k8s.io]" && fmt.Sprint(get(r, "verbs")) == "[get]" &&
				strings.HasPrefix(fmt.Sprint(get(r, "resourceNames")), "[aibrix-controller-manager")
			if get(r, "nonResourceURLs") == nil && groups != "[authentication.k8s.io]" && groups != "[authorization.k8s.io]" && !aibrixLeases {
				t.Errorf("%s grants %v on %v in every namespace", k, get(r, "verbs"), get(r, "resources"))
			}
		}
	}
	job := must("batch/v1 Job loraplane-system/loraplane-adapter-cleanup")
	if diff := cmp.Diff([]string{"--delete-all-adapters", "--cleanup-timeout=6m", "--watch-namespace=team-a,team-b", "--v=4"}, args(t, job)); diff != "" {
		t.Errorf("cleanup hook arguments (-want +got):\n%s", diff)
	}
}

// podValues checks what ci/full-values.yaml sets on a controller's pod: ServiceAccount name
// and annotations, podLabels, extra env/volumes/mounts, probes, security contexts.
func podValues(t *testing.T, objs map[string]object, name string, d object) {
	t.Helper()
	data, err := sigsyaml.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.UnmarshalStrict(data, &appsv1.Deployment{}); err != nil {
		t.Errorf("%s: the Deployment has a field its API type lacks: %v", name, err)
	}
	sa := map[string]string{"adapter-controller": "loraplane-adapters", "router-controller": "loraplane-routes"}[name]
	acct, ok := objs["v1 ServiceAccount loraplane-system/"+sa]
	if !ok || str(acct, "metadata", "annotations", "iam.example.com/role") != sa {
		t.Errorf("%s: ServiceAccount %s rendered %v with annotations %v", name, sa, ok, get(acct, "metadata", "annotations"))
	}
	pod := get(d, "spec", "template", "spec").(map[string]any)
	if pod["serviceAccountName"] != sa {
		t.Errorf("%s: serviceAccountName %v, want %s", name, pod["serviceAccountName"], sa)
	}
	if str(d, "spec", "template", "metadata", "labels", "example.com/cost-center") != "ml-platform" ||
		str(d, "spec", "template", "metadata", "labels", "app.kubernetes.io/name") != name {
		t.Errorf("%s: pod labels %v", name, get(d, "spec", "template", "metadata", "labels"))
	}
	c := container(t, d)
	for field, want := range map[string]string{
		"env":            "GODEBUG",
		"volumeMounts":   "/etc/ssl/certs/corporate",
		"readinessProbe": "periodSeconds:7",
		"livenessProbe":  "failureThreshold:5",
	} {
		if got := fmt.Sprint(c[field]); !strings.Contains(got, want) {
			t.Errorf("%s: container %s %s lacks %q", name, field, got, want)
		}
	}
	if got := fmt.Sprint(pod["volumes"]); !strings.Contains(got, "corporate-ca") || !strings.Contains(got, "loraplane-metrics-tls") {
		t.Errorf("%s: volumes %s", name, got)
	}
	if got := fmt.Sprint(pod["securityContext"]); !strings.Contains(got, "runAsUser:1000") || !strings.Contains(got, "fsGroup:1000") {
		t.Errorf("%s: pod securityContext %s", name, got)
	}
}

// TestChartMonitoringMatchesDeploy: the chart's PrometheusRule is deploy/prometheus's (its
// files/ copy must be identical, and the rendered rules equal the file's); with
// monitoring.serviceMonitor.enabled and tls.source=secret the chart renders every object of
// deploy/prometheus that makes a scrape succeed (ServiceMonitors with verified TLS and the
// reader's token, the reader's ServiceAccount, token Secret and binding, the discovery Role),
// field by field.
func TestChartMonitoringMatchesDeploy(t *testing.T) {
	root := repoRoot(t)
	source, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile(filepath.Join(root, chartDir, "files", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(source, copied) {
		t.Fatalf("%s/files/prometheusrule.yaml differs from deploy/prometheus/prometheusrule.yaml: copy it again", chartDir)
	}
	want := byKey(run(t, root, tool(t, root, "kubectl"), "kustomize", "deploy/prometheus"))
	objs := byKey(helmTemplate(t, root, "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.serviceMonitor.enabled=true",
		"--set", "monitoring.serviceMonitor.tls.source=secret",
		"--set", "monitoring.serviceMonitor.prometheusServiceAccount.name=prometheus-k8s",
		"--set", "monitoring.serviceMonitor.prometheusServiceAccount.namespace=monitoring"))
	if len(want) < 8 {
		t.Fatalf("deploy/prometheus rendered %d objects", len(want))
	}
	for _, k := range keys(want) {
		got, ok := objs[k]
		if !ok {
			t.Errorf("deploy/prometheus has %s; the chart does not render it", k)
			continue
		}
		if diff := cmp.Diff(want[k], withoutHelmMetadata(got)); diff != "" {
			t.Errorf("%s differs (-deploy/prometheus +chart):\n%s", k, diff)
		}
	}
}

// TestChartServiceMonitorRefusesHalfConfigured: a ServiceMonitor that could never scrape
// (no certificate source, a cert-manager source without issuer, no token) is not rendered:
// helm template fails saying what is missing. Over plain HTTP nothing is needed.
func TestChartServiceMonitorRefusesHalfConfigured(t *testing.T) {
	root := repoRoot(t)
	on := []string{"--set", "monitoring.serviceMonitor.enabled=true"}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no TLS source":               {nil, "needs monitoring.serviceMonitor.tls.source"},
		"cert-manager without issuer": {[]string{"--set", "monitoring.serviceMonitor.tls.source=certManager"}, "needs monitoring.serviceMonitor.tls.certManager.issuerRef.name"},
		"no token":                    {[]string{"--set", "monitoring.serviceMonitor.tls.source=secret", "--set", "monitoring.serviceMonitor.authorization.createReader=false"}, "needs a bearer token"},
		"certificate dir not mounted": {[]string{"--set", "monitoring.serviceMonitor.tls.source=secret", "--set", "routerController.flags.metrics-cert-dir="}, "metrics-cert-dir is empty"},
		"discovery without namespace": {[]string{"--set", "monitoring.serviceMonitor.tls.source=insecure", "--set", "monitoring.serviceMonitor.prometheusServiceAccount.name=p"}, "prometheusServiceAccount.namespace is required"},
	} {
		out, err := helmFails(t, root, append(on, tc.args...)...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%s: helm template: %v, output %q; want a failure saying %q", name, err, out, tc.want)
		}
	}
	objs := byKey(helmTemplate(t, root, "--set", "monitoring.serviceMonitor.enabled=true",
		"--set", "adapterController.flags.metrics-secure=false", "--set", "routerController.flags.metrics-secure=false"))
	sm := objs["monitoring.coreos.com/v1 ServiceMonitor loraplane-system/adapter-controller"]
	if eps, _ := get(sm, "spec", "endpoints").([]any); len(eps) != 1 || get(eps[0], "scheme") != "http" || get(eps[0], "authorization") != nil {
		t.Errorf("plain HTTP: ServiceMonitor endpoints %v, want one http endpoint without authorization", get(sm, "spec", "endpoints"))
	}
}

// helmFails runs helm template with args and returns its combined output and error.
func helmFails(t *testing.T, root string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(tool(t, root, "helm"), append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestChartSchemaRefusesTypos: values.schema.json refuses unknown keys (at the top, nested,
// among the flags) and wrong types: helm lint and helm template both fail naming the key.
func TestChartSchemaRefusesTypos(t *testing.T) {
	root := repoRoot(t)
	helm := tool(t, root, "helm")
	for _, tc := range []struct{ set, want string }{
		{"watchNamespace={a}", "'watchNamespace' not allowed"},
		{"adapterController.replcas=3", "'replcas' not allowed"},
		{"routerController.flags.gateway-nmespace=gw", "'gateway-nmespace' not allowed"},
		{"monitoring.serviceMonitor.tls.source=vault", "/monitoring/serviceMonitor/tls/source"},
		{"crds.keep=maybe", "/crds/keep"},
		{"adapterController.podDisruptionBudget.enabeld=true", "'enabeld' not allowed"},
		{"networkPolicy.enginePorts={0}", "/networkPolicy/enginePorts/0"},
	} {
		for _, cmdArgs := range [][]string{
			{"lint", "--strict", chartDir, "--namespace", namespace, "--set", tc.set},
			{"template", release, chartDir, "--namespace", namespace, "--set", tc.set},
		} {
			cmd := exec.Command(helm, cmdArgs...)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("helm %s --set %s: %v; want a failure saying %q, got:\n%s", cmdArgs[0], tc.set, err, tc.want, out)
			}
		}
	}
}

// podSpecs returns the pod specs of every Deployment and Job rendered.
func podSpecs(objs []object) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		if k := str(o, "kind"); k == "Deployment" || k == "Job" {
			out[key(o)], _ = get(o, "spec", "template", "spec").(map[string]any)
		}
	}
	return out
}

// TestChartOpenShiftValues: ci/openshift-values.yaml renders pods that ask for no UID or GID
// (restricted-v2 assigns them) and keep the rest of the restricted profile; nor does it
// render or label the release namespace.
func TestChartOpenShiftValues(t *testing.T) {
	root := repoRoot(t)
	objs := helmTemplate(t, root, "-f", filepath.Join(chartDir, "ci", "openshift-values.yaml"),
		"--set", "adapterController.cleanupOnUninstall.enabled=true")
	pods := podSpecs(objs)
	if len(pods) != 3 {
		t.Fatalf("%d pod templates rendered, want 3 (2 Deployments, the cleanup Job)", len(pods))
	}
	for k, pod := range pods {
		containers, _ := pod["containers"].([]any)
		for _, sc := range append([]any{pod["securityContext"]}, get(containers[0], "securityContext")) {
			for _, field := range []string{"runAsUser", "runAsGroup", "fsGroup"} {
				if v := get(sc, field); v != nil {
					t.Errorf("%s: securityContext %s=%v; OpenShift assigns it", k, field, v)
				}
			}
			if get(sc, "runAsNonRoot") != true {
				t.Errorf("%s: securityContext %v lost runAsNonRoot", k, sc)
			}
		}
		if got := fmt.Sprint(get(containers[0], "securityContext")); !strings.Contains(got, "allowPrivilegeEscalation:false") || !strings.Contains(got, "drop:[ALL]") {
			t.Errorf("%s: container securityContext %s", k, got)
		}
	}
	for _, o := range objs {
		if str(o, "kind") == "Namespace" {
			t.Errorf("the OpenShift values render %s", key(o))
		}
	}
}

// TestChartClusterScopedNamesPerRelease: every cluster-scoped object is named after the
// release (its full name), so two releases share none and --take-ownership cannot adopt
// another install's; nameOverride and fullnameOverride change that name. The CRD is the one
// cluster-scoped object that is shared by nature.
func TestChartClusterScopedNamesPerRelease(t *testing.T) {
	root := repoRoot(t)
	all := []string{"--set", "adapterController.cleanupOnUninstall.enabled=true", "--set", "monitoring.serviceMonitor.enabled=true",
		"--set", "monitoring.serviceMonitor.tls.source=insecure"}
	names := func(release string, extra ...string) []string {
		t.Helper()
		args := append([]string{"template", release, chartDir, "--namespace", "ns-" + release}, append(all, extra...)...)
		var out []string
		for _, o := range run(t, root, tool(t, root, "helm"), args...) {
			if str(o, "metadata", "namespace") == "" && str(o, "kind") != "CustomResourceDefinition" {
				out = append(out, str(o, "kind")+"/"+str(o, "metadata", "name"))
			}
		}
		sort.Strings(out)
		return out
	}
	for _, tc := range []struct {
		release    string
		extra      []string
		wantPrefix string
	}{
		{"loraplane", nil, "loraplane-"},
		{"blue", nil, "blue-loraplane-"},
		{"green", []string{"--set", "nameOverride=lp"}, "green-lp-"},
		{"red", []string{"--set", "fullnameOverride=ml-loraplane"}, "ml-loraplane-"},
	} {
		got := names(tc.release, tc.extra...)
		if len(got) < 7 {
			t.Errorf("%s: only %d cluster-scoped objects: %v", tc.release, len(got), got)
		}
		for _, n := range got {
			if _, name, _ := strings.Cut(n, "/"); !strings.HasPrefix(name, tc.wantPrefix) {
				t.Errorf("release %s: %s is not named %s...", tc.release, n, tc.wantPrefix)
			}
		}
	}
	blue, green := names("blue"), names("green")
	for _, n := range blue {
		if slices.Contains(green, n) {
			t.Errorf("releases blue and green both render %s", n)
		}
	}
}

// TestChartNetworkPolicyMatchesComponent: networkPolicy.enabled renders exactly the
// NetworkPolicies of the kustomize component deploy/components/networkpolicy.
func TestChartNetworkPolicyMatchesComponent(t *testing.T) {
	root := repoRoot(t)
	want := byKey(run(t, root, tool(t, root, "kubectl"), "kustomize", "deploy/components/networkpolicy"))
	got := map[string]object{}
	for k, o := range byKey(helmTemplate(t, root, "--set", "networkPolicy.enabled=true")) {
		if str(o, "kind") == "NetworkPolicy" {
			got[k] = withoutHelmMetadata(o)
		}
	}
	if len(want) != 2 {
		t.Fatalf("the component renders %d objects, want 2", len(want))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NetworkPolicies (-component +chart):\n%s", diff)
	}
	// Every field is a field of the API type (also with every networkPolicy value set).
	full := byKey(helmTemplate(t, root, "-f", filepath.Join(chartDir, "ci", "full-values.yaml")))
	for _, o := range []object{want["networking.k8s.io/v1 NetworkPolicy loraplane-system/adapter-controller"],
		full["networking.k8s.io/v1 NetworkPolicy loraplane-system/adapter-controller"]} {
		data, err := sigsyaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var np networkingv1.NetworkPolicy
		if err := sigsyaml.UnmarshalStrict(data, &np); err != nil || len(np.Spec.Egress) < 2 {
			t.Errorf("NetworkPolicy %s: %v, %d egress rules", key(o), err, len(np.Spec.Egress))
		}
	}
	if _, ok := byKey(helmTemplate(t, root))["networking.k8s.io/v1 NetworkPolicy loraplane-system/adapter-controller"]; ok {
		t.Error("NetworkPolicies are rendered by default")
	}
}

// TestChartAvailabilityDefaults: a PodDisruptionBudget per controller by default, a preferred
// pod anti-affinity from 2 replicas on (none for 1), and a given affinity replaces it.
func TestChartAvailabilityDefaults(t *testing.T) {
	root := repoRoot(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "preferredDuringSchedulingIgnoredDuringExecution"},
		{[]string{"--set", "adapterController.replicas=1"}, "<nil>"},
		{[]string{"--set", "adapterController.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].key=metadata.name",
			"--set", "adapterController.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].operator=Exists"}, "nodeAffinity"},
	} {
		objs := byKey(helmTemplate(t, root, tc.args...))
		d := objs["apps/v1 Deployment loraplane-system/adapter-controller"]
		got := fmt.Sprint(get(d, "spec", "template", "spec", "affinity"))
		if !strings.Contains(got, tc.want) || (tc.want != "preferredDuringSchedulingIgnoredDuringExecution" && strings.Contains(got, "podAntiAffinity")) {
			t.Errorf("%v: affinity %s, want %s", tc.args, got, tc.want)
		}
		if _, ok := objs["policy/v1 PodDisruptionBudget loraplane-system/adapter-controller"]; !ok {
			t.Errorf("%v: no PodDisruptionBudget", tc.args)
		}
	}
}

// TestChartRulesOfDisabledController: with a controller switched off, the chart's rules
// leave out the ones that select only its job (its LoraplaneControllerAbsent would fire
// forever) and keep every other rule.
func TestChartRulesOfDisabledController(t *testing.T) {
	root := repoRoot(t)
	exprs := func(args ...string) []string {
		objs := byKey(helmTemplate(t, root, append([]string{"--set", "monitoring.prometheusRule.enabled=true"}, args...)...))
		var out []string
		for _, g := range get(objs["monitoring.coreos.com/v1 PrometheusRule loraplane-system/loraplane"], "spec", "groups").([]any) {
			for _, r := range g.(map[string]any)["rules"].([]any) {
				out = append(out, r.(map[string]any)["expr"].(string))
			}
		}
		return out
	}
	all := exprs()
	for _, c := range []struct{ value, job string }{{"adapterController", "adapter-controller"}, {"routerController", "router-controller"}} {
		off := exprs("--set", c.value+".enabled=false")
		var want []string
		for _, e := range all {
			if !strings.Contains(e, `job="`+c.job+`"`) {
				want = append(want, e)
			}
		}
		if len(want) != len(all)-1 {
			t.Fatalf("%d rules select only job %s, want 1 (its LoraplaneControllerAbsent)", len(all)-len(want), c.job)
		}
		if diff := cmp.Diff(want, off); diff != "" {
			t.Errorf("rules with %s.enabled=false (-want +got):\n%s", c.value, diff)
		}
	}
}

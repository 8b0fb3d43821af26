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
	"k8s.io/apimachinery/pkg/util/yaml"

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
// deploy/default and nothing else, each equal field by field once Helm's labels are removed;
// its only other objects are the uninstall hook's.
func TestChartDefaultsMatchKustomize(t *testing.T) {
	root := repoRoot(t)
	kustomized := byKey(run(t, root, tool(t, root, "kubectl"), "kustomize", "deploy/default"))
	objs, hookObjs := hooks(helmTemplate(t, root))
	chart := map[string]object{}
	for _, o := range objs {
		k := key(o)
		if _, dup := chart[k]; dup {
			t.Errorf("the chart renders %s twice", k)
		}
		if str(o, "kind") == "Namespace" && str(o, "metadata", "annotations", "helm.sh/resource-policy") != "keep" {
			t.Errorf("%s would be deleted by helm uninstall, and the release record in it with it: want helm.sh/resource-policy: keep", k)
		}
		chart[k] = withoutHelmMetadata(o)
	}
	if len(kustomized) == 0 {
		t.Fatal("kubectl kustomize deploy/default rendered nothing")
	}
	for _, k := range keys(kustomized) {
		c, ok := chart[k]
		if !ok {
			t.Errorf("deploy/default has %s; the chart does not render it", k)
			continue
		}
		if diff := cmp.Diff(kustomized[k], c); diff != "" {
			t.Errorf("%s differs (-deploy/default +chart):\n%s", k, diff)
		}
	}
	for _, k := range keys(chart) {
		if _, ok := kustomized[k]; !ok {
			t.Errorf("the chart renders %s; deploy/default does not have it", k)
		}
	}
	t.Logf("%d objects compared", len(kustomized))

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
		t.Errorf("hooks (-want +got):\n%s", diff)
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
		"adapter-controller": {values.AdapterController.Flags, "registry.example.com/mirror/adapter-controller:v9.9.8"},
		"router-controller":  {values.RouterController.Flags, "registry.example.com/platform/router-controller:v9.9.9"},
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
		// Namespaced install: Roles in the watched namespaces.
		for _, ns := range []string{"team-a", "team-b"} {
			must("rbac.authorization.k8s.io/v1 Role " + ns + "/loraplane-" + name)
			must("rbac.authorization.k8s.io/v1 RoleBinding " + ns + "/loraplane-" + name)
		}
	}
	if got := args(t, must("apps/v1 Deployment loraplane-system/adapter-controller")); !slices.Contains(got, "--logging-format=text") {
		t.Errorf("adapter-controller: extraArgs missing from %v", got)
	}
	must("rbac.authorization.k8s.io/v1 Role gateways/loraplane-router-controller")
	if _, ok := objs["v1 Namespace /loraplane-system"]; ok {
		t.Error("namespace.create=false still renders the release namespace")
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

// TestChartMonitoringMatchesDeploy: the chart's PrometheusRule is deploy/prometheus's (its
// files/ copy must be identical, and the rendered rules equal the file's), and its
// ServiceMonitors authorize and verify TLS as deploy/prometheus's do.
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
	want, err := decode(source)
	if err != nil || len(want) != 1 {
		t.Fatalf("deploy/prometheus/prometheusrule.yaml: %v (%d objects)", err, len(want))
	}
	objs := byKey(helmTemplate(t, root, "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.serviceMonitor.enabled=true",
		"--set", "monitoring.serviceMonitor.authorization.secretName=loraplane-metrics-reader-token"))
	rule, ok := objs["monitoring.coreos.com/v1 PrometheusRule loraplane-system/loraplane"]
	if !ok {
		t.Fatalf("no PrometheusRule rendered; got %v", keys(objs))
	}
	if diff := cmp.Diff(want[0]["spec"], rule["spec"]); diff != "" {
		t.Errorf("the chart's rules differ from deploy/prometheus (-want +got):\n%s", diff)
	}
	for _, name := range []string{"adapter-controller", "router-controller"} {
		sm := objs["monitoring.coreos.com/v1 ServiceMonitor loraplane-system/"+name]
		ep := fmt.Sprint(get(sm, "spec", "endpoints"))
		for _, s := range []string{"loraplane-metrics-reader-token", "serverName:" + name + "-metrics.loraplane-system.svc", "loraplane-metrics-cert",
			"replacement:" + name + " targetLabel:job"} {
			if !strings.Contains(ep, s) {
				t.Errorf("ServiceMonitor %s: endpoints %s lack %q", name, ep, s)
			}
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

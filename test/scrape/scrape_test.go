package scrape

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

var update = flag.Bool("update", false, "rewrite hack/promcheck/testdata/exported-metrics.txt from the scrape")

// exportedFile is the committed list of the metrics the binaries export, one
// "<binary> <family> <type>" per line, sorted.
const exportedFile = "hack/promcheck/testdata/exported-metrics.txt"

// kept reports whether a family goes into the committed list. The Go runtime's go_* families
// change with the Go version and process_* with the platform; of those only
// process_start_time_seconds is used (by the slow-startup alert).
func kept(family string) bool {
	return !strings.HasPrefix(family, "go_") && (!strings.HasPrefix(family, "process_") || family == "process_start_time_seconds")
}

func TestExportedMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: builds the binaries and runs them against envtest")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	gw, err := testenv.GatewayAPICRDDir()
	if err != nil {
		t.Fatal(err)
	}
	env, err := testenv.Start(gw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	k8s, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	dir := t.TempDir()
	kubeconfig := writeKubeconfig(t, env, dir)
	for _, ns := range []string{"aibrix-system", "models"} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}

	// Both serve metrics as deployed: over HTTPS (--metrics-secure) with a mounted
	// certificate, scraped with the token of a ServiceAccount holding the metrics-reader role.
	certDir := filepath.Join(dir, "metrics-cert")
	if err := os.Mkdir(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := testenv.WriteServingCertificate(certDir, time.Now().Add(365*24*time.Hour), "localhost"); err != nil {
		t.Fatal(err)
	}
	token := scraperToken(ctx, t, env, k8s, root)

	type binary struct{ name, metrics string }
	binaries := []binary{{name: "adapter-controller"}, {name: "router-controller"}}
	for i := range binaries {
		b := &binaries[i]
		build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, b.name), "./"+b.name)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", b.name, err, out)
		}
		b.metrics = testenv.FreeAddr()
		args := []string{"--kubeconfig=" + kubeconfig, "--metrics-bind-address=" + b.metrics,
			"--health-probe-bind-address=" + testenv.FreeAddr(), "--leader-elect", "--leader-election-namespace=default",
			"--metrics-secure", "--metrics-cert-dir=" + certDir}
		if b.name == "adapter-controller" {
			args = append(args, "--inventory-period=1s")
		}
		run := exec.CommandContext(ctx, filepath.Join(dir, b.name), args...)
		logFile, err := os.Create(filepath.Join(dir, b.name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		run.Stdout, run.Stderr = logFile, logFile
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = run.Process.Signal(os.Interrupt)
			_ = run.Wait()
			logFile.Close()
			if t.Failed() {
				if out, err := os.ReadFile(logFile.Name()); err == nil {
					t.Logf("%s log (last 3000 bytes):\n%s", b.name, tail(out, 3000))
				}
			}
		})
	}

	// Work for both: an adapter loaded on a fake engine, reloaded with a new artifact and
	// deleted (unloaded), another one left loaded; a Deployment of the model, routed.
	const ip = "127.0.91.1"
	eng, err := fakeengine.Start(ip, 8000, fakeengine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	labels := map[string]string{"model.aibrix.ai/name": "m", "adapter.model.aibrix.ai/enabled": "true"}
	// A known adapter capacity puts the model pool's slot series in the scrape.
	withCapacity := func(p *corev1.Pod) { p.Annotations = map[string]string{"loraplane.io/adapter-capacity": "4"} }
	if _, err := testenv.CreateReadyPod(ctx, k8s, "models", "m-0", ip, labels, withCapacity); err != nil {
		t.Fatal(err)
	}
	a := modelAdapter("lora", "huggingface://org/lora-v1", labels)
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, k8s, a, "Running with lora-v1", running("huggingface://org/lora-v1"))
	if err := unstructured.SetNestedField(a.Object, "huggingface://org/lora-v2", "spec", "artifactURL"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, k8s, a, "Running with lora-v2", running("huggingface://org/lora-v2"))
	// A second adapter stays, so that the per-adapter series are in the scrape.
	stays := modelAdapter("kept", "huggingface://org/kept", labels)
	if err := k8s.Create(ctx, stays); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, k8s, stays, "Running", running("huggingface://org/kept"))
	one := int32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "models", Name: "m", Labels: map[string]string{"model.aibrix.ai/name": "m"}},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "m"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "m"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "vllm"}}}}},
	}
	if err := k8s.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, 200*time.Millisecond, "the adapter deleted and unloaded, the model routed", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(a), modelAdapter("", "", nil))
		var routes bytes.Buffer
		got := scrape(t, binaries[1].metrics, token, &routes)
		managed := got["loraplane_routes"] != "" && strings.Contains(routes.String(), `loraplane_routes{state="managed"} `) &&
			!strings.Contains(routes.String(), `loraplane_routes{state="managed"} 0`)
		return client.IgnoreNotFound(err) == nil && err != nil && slices.Equal(eng.Loaded(), []string{"kept"}) && managed,
			fmt.Sprintf("adapter get: %v, engine holds %v, route managed: %v", err, eng.Loaded(), managed)
	})

	var lines []string
	for _, b := range binaries {
		for name, typ := range scrape(t, b.metrics, token, nil) {
			if kept(name) {
				lines = append(lines, fmt.Sprintf("%s %s %s", b.name, name, typ))
			}
		}
	}
	slices.Sort(lines)
	got := strings.Join(lines, "\n") + "\n"
	path := filepath.Join(root, exportedFile)
	if *update {
		header := "# Metric families the binaries export, from a real scrape (test/scrape, make metrics-scrape): <binary> <family> <type>.\n"
		if err := os.WriteFile(path, []byte(header+got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d families to %s", len(lines), path)
		return
	}
	wantBytes, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for l := range strings.Lines(string(wantBytes)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			want = append(want, l)
		}
	}
	missing, extra := diff(want, lines), diff(lines, want)
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("the binaries' metrics differ from %s (regenerate it with make metrics-scrape and check the alerts and dashboard still hold):\n  listed but not exported: %v\n  exported but not listed: %v",
			exportedFile, missing, extra)
	}
}

// diff returns the elements of a not in b.
func diff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// scraperToken returns the token of a ServiceAccount bound to the metrics-reader role of
// deploy/prometheus, the identity a Prometheus scrapes with.
func scraperToken(ctx context.Context, t *testing.T, env *testenv.Env, k8s client.Client, root string) string {
	t.Helper()
	if err := env.Apply(filepath.Join(root, "deploy", "prometheus", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus", Namespace: "default"}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scrape-test-metrics-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "loraplane-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}}}
	for _, obj := range []client.Object{sa, binding} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := k8s.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatalf("issuing the scraper's token: %v", err)
	}
	return tr.Status.Token
}

// scrapeClient scrapes the loopback metrics endpoints, whose test certificate is self-signed.
var scrapeClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}} //nolint:gosec // loopback test server

// get reads the body of a GET of url with the bearer token (as text, not protobuf) into body.
func get(ctx context.Context, url, token string, body *bytes.Buffer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/plain")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	_, err = body.ReadFrom(resp.Body)
	return err
}

// scrape returns the metric families of the /metrics at addr with their types; raw, when
// set, receives the exposition.
func scrape(t *testing.T, addr, token string, raw *bytes.Buffer) map[string]string {
	t.Helper()
	var body bytes.Buffer
	var err error
	testenv.Poll(30*time.Second, 200*time.Millisecond, func() bool {
		body.Reset()
		err = get(t.Context(), "https://"+addr+"/metrics", token, &body)
		return err == nil
	})
	if err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	if raw != nil {
		raw.Write(body.Bytes())
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(&body)
	if err != nil {
		t.Fatalf("parsing the scrape of %s: %v", addr, err)
	}
	out := map[string]string{}
	for name, f := range families {
		out[name] = strings.ToLower(dto.MetricType_name[int32(f.GetType())])
	}
	return out
}

// modelAdapter is a ModelAdapter (unstructured: this module does not import the API types)
// selecting the pods with labels.
func modelAdapter(name, artifact string, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "model.aibrix.ai/v1alpha1", "kind": "ModelAdapter",
		"metadata": map[string]any{"namespace": "models", "name": name},
	}}
	if artifact != "" {
		match := map[string]any{}
		for k, v := range labels {
			match[k] = v
		}
		u.Object["spec"] = map[string]any{"artifactURL": artifact, "podSelector": map[string]any{"matchLabels": match}}
	}
	return u
}

// running reports whether an adapter is Running with its one instance serving artifact.
func running(artifact string) func(*unstructured.Unstructured) (bool, string) {
	return func(a *unstructured.Unstructured) (bool, string) {
		phase, _, _ := unstructured.NestedString(a.Object, "status", "phase")
		instances, _, _ := unstructured.NestedSlice(a.Object, "status", "instanceArtifacts")
		ok := phase == "Running" && len(instances) == 1 && fmt.Sprint(instances[0].(map[string]any)["artifactURL"]) == artifact
		return ok, fmt.Sprintf("phase %s, instances %v", phase, instances)
	}
}

func waitAdapter(t *testing.T, k8s client.Client, a *unstructured.Unstructured, what string, cond func(*unstructured.Unstructured) (bool, string)) {
	t.Helper()
	testenv.Eventually(t, time.Minute, 200*time.Millisecond, "adapter "+what, func() (bool, string) {
		got := modelAdapter(a.GetName(), "", nil)
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(a), got); err != nil {
			return false, err.Error()
		}
		a.SetResourceVersion(got.GetResourceVersion())
		return cond(got)
	})
}

// writeKubeconfig writes the admin configuration of env for the binaries.
func writeKubeconfig(t *testing.T, env *testenv.Env, dir string) string {
	t.Helper()
	cfg := env.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

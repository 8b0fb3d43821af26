package app_test

import (
	"context"
	"crypto/tls"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/shared/app"
	"github.com/loraplane/loraplane/shared/syncgate"
	"github.com/loraplane/loraplane/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	var err error
	if env, err = testenv.Start(); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// TestSecureMetrics: with --metrics-secure an anonymous scrape is refused and a
// ServiceAccount bound to the metrics-reader role in deploy/prometheus may scrape.
func TestSecureMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The role a Prometheus needs, as shipped in deploy/prometheus, bound to a test account.
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Apply(filepath.Join(root, "deploy", "prometheus", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus", Namespace: "default"}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader-test"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "loraplane-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}}}
	for _, obj := range []client.Object{sa, binding} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	if err := admin.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatalf("issuing a ServiceAccount token: %v", err)
	}

	o := app.NewOptions("secure-metrics")
	o.MetricsSecure = true
	o.MetricsBindAddress = testenv.FreeAddr()
	o.HealthProbeBindAddress = testenv.FreeAddr()
	a, err := app.New(o, app.Config{Controller: "secure-metrics", Scheme: scheme, RESTConfig: env.Config})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Gate.Register(ctx, syncgate.Typed(&corev1.ConfigMap{})); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// The metrics server uses a self-signed certificate unless one is configured.
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	scrape := func(token string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+o.MetricsBindAddress+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	var anon, authorised int
	testenv.Poll(30*time.Second, 200*time.Millisecond, func() bool {
		anon, err = scrape("")
		return err == nil
	})
	if err != nil {
		t.Fatalf("the secure metrics endpoint did not answer: %v", err)
	}
	if authorised, err = scrape(tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	// Plain HTTP gets the TLS server's 400, never the metrics.
	plainReq, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+o.MetricsBindAddress+"/metrics", nil)
	plainStatus := 0
	if resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(plainReq); err == nil {
		plainStatus = resp.StatusCode
		resp.Body.Close()
	}
	t.Logf("anonymous scrape: %d, ServiceAccount with the metrics-reader role: %d, plain HTTP: %d", anon, authorised, plainStatus)
	if anon != http.StatusUnauthorized && anon != http.StatusForbidden {
		t.Errorf("anonymous scrape answered %d, want 401 or 403", anon)
	}
	if authorised != http.StatusOK {
		t.Errorf("authorised scrape answered %d, want 200", authorised)
	}
	if plainStatus == http.StatusOK {
		t.Error("the secure metrics endpoint served metrics over plain HTTP")
	}
}

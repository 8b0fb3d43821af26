package app_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/loraplane/loraplane/shared/app"
	"github.com/loraplane/loraplane/shared/syncgate"
	"github.com/loraplane/loraplane/test/testenv"
)

// testCA is a CA that signs serving certificates for the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "loraplane-metrics-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue writes tls.crt and tls.key for dnsNames, signed by the CA, into dir.
func (ca *testCA) issue(t *testing.T, dir string, dnsNames ...string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsNames[0]}, DNSNames: dnsNames,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMetricsServingCertificate: with --metrics-cert-dir holding a certificate, a scraper
// verifying against its CA with the Service's DNS name as server name gets through TLS (to
// the authentication filter: 401 without a token); the self-signed fallback cannot be
// verified that way. This is what the ServiceMonitors in deploy/prometheus rely on.
func TestMetricsServingCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	const serverName = "adapter-controller-metrics.loraplane-system.svc"
	ca := newTestCA(t)
	certDir := t.TempDir()
	ca.issue(t, certDir, serverName, "router-controller-metrics.loraplane-system.svc")

	verified := func(addr string) error {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: ca.pool, ServerName: serverName, MinVersion: tls.VersionTLS12}}}
		var err error
		testenv.Poll(30*time.Second, 200*time.Millisecond, func() bool {
			var resp *http.Response
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+addr+"/metrics", nil)
			if resp, err = c.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					err = errors.New("an anonymous scrape got " + resp.Status + ", want 401")
				}
				return true
			}
			var certErr *tls.CertificateVerificationError
			return errors.As(err, &certErr) // the server answers; its certificate does not verify
		})
		return err
	}
	run := func(certDir string) string {
		scheme := runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		o := app.NewOptions("metrics-cert")
		o.MetricsSecure = true
		o.MetricsCertDir = certDir
		o.MetricsBindAddress = testenv.FreeAddr()
		o.HealthProbeBindAddress = testenv.FreeAddr()
		a, err := app.New(o, app.Config{Controller: "metrics-cert", Scheme: scheme, RESTConfig: env.Config})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Gate.Register(t.Context(), syncgate.Typed(&corev1.ConfigMap{})); err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
		return o.MetricsBindAddress
	}

	if err := verified(run(certDir)); err != nil {
		t.Errorf("with --metrics-cert-dir: %v", err)
	}
	err := verified(run(t.TempDir())) // empty: the self-signed fallback
	var certErr *tls.CertificateVerificationError
	if !errors.As(err, &certErr) {
		t.Errorf("with an empty --metrics-cert-dir the certificate verified against the test CA (err %v); want a verification failure", err)
	}
}

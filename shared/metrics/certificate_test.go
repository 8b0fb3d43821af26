package metrics_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loraplane/loraplane/shared/metrics"
	"github.com/loraplane/loraplane/test/testenv"
)

// writeCertificate writes a certificate valid until notAfter to path (its directory's
// tls.crt).
func writeCertificate(t *testing.T, path string, notAfter time.Time) {
	t.Helper()
	if err := testenv.WriteServingCertificate(filepath.Dir(path), notAfter, "localhost"); err != nil {
		t.Fatal(err)
	}
}

// TestCertificateExpiry: the collector reports the notAfter of the file as it is at scrape
// time (a rotated certificate is seen at the next scrape) and nothing for a missing or
// unparsable file.
func TestCertificateExpiry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tls.crt")
	c := metrics.NewCertificateExpiry(path)
	want := func(notAfter time.Time) string {
		return fmt.Sprintf(`
# HELP %[1]s The notAfter of the certificate the metrics endpoint serves (--metrics-cert-dir's tls.crt), as Unix seconds, read at scrape time.
# TYPE %[1]s gauge
%[1]s %[2]d
`, metrics.CertificateExpiryName, notAfter.Unix())
	}
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("without a certificate file: %d samples, want 0", n)
	}
	first := time.Date(2027, 12, 6, 22, 0, 0, 0, time.UTC)
	writeCertificate(t, path, first)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(first))); err != nil {
		t.Error(err)
	}
	rotated := first.Add(365 * 24 * time.Hour)
	writeCertificate(t, path, rotated)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(rotated))); err != nil {
		t.Errorf("after rotation: %v", err)
	}
	if err := os.WriteFile(path, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("with an unparsable file: %d samples, want 0", n)
	}
}

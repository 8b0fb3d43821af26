package metrics

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
)

// CertificateExpiryName is the family NewCertificateExpiry exports.
const CertificateExpiryName = namespace + "_metrics_certificate_expiry_timestamp_seconds"

// certificateExpiry reports the notAfter of the metrics serving certificate, read from its
// file at scrape time: a certificate rotated in place (the mounted Secret, which the metrics
// server reloads) is reported as soon as it is served. A file that cannot be read or parsed
// yields no sample (the scrape itself still succeeds): the alert on this metric then stays
// silent and certwatcher_read_certificate_errors_total counts the server's own failures.
type certificateExpiry struct {
	desc *prometheus.Desc
	path string
}

// NewCertificateExpiry returns the collector of loraplane_metrics_certificate_expiry_timestamp_seconds
// for the PEM certificate at path (the first CERTIFICATE block: the leaf).
func NewCertificateExpiry(path string) prometheus.Collector {
	return &certificateExpiry{
		desc: prometheus.NewDesc(CertificateExpiryName,
			"The notAfter of the certificate the metrics endpoint serves (--metrics-cert-dir's tls.crt), as Unix seconds, read at scrape time.",
			nil, nil),
		path: path,
	}
}

// Describe implements prometheus.Collector.
func (c *certificateExpiry) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *certificateExpiry) Collect(ch chan<- prometheus.Metric) {
	cert, err := ReadCertificate(c.path)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(cert.NotAfter.Unix()))
}

// ReadCertificate parses the first CERTIFICATE block of the PEM file at path.
func ReadCertificate(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			return cert, nil
		}
	}
	return nil, errors.New(path + ": no PEM CERTIFICATE block")
}

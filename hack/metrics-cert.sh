#!/usr/bin/env bash
# Makes the Secret loraplane-metrics-cert without cert-manager: a CA and a serving
# certificate for both controllers' metrics Services, signed by it (openssl). The controllers
# serve tls.crt/tls.key (--metrics-cert-dir, mounted from the Secret); the ServiceMonitors in
# deploy/prometheus verify them against ca.crt.
#
#   hack/metrics-cert.sh            # apply the Secret to the cluster of $KUBECONFIG
#   hack/metrics-cert.sh --print    # print the Secret's YAML instead
#
# Environment: NAMESPACE (default loraplane-system), DAYS (validity, default 365). Re-running
# replaces the CA and the certificate: the controllers pick the new files up when the kubelet
# refreshes the mounted Secret (about a minute), the Prometheus Operator the new ca.crt on its
# next reconcile; scrapes in between may fail verification once.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
kubectl=${KUBECTL:-$root/bin/kubectl}
ns=${NAMESPACE:-loraplane-system}
days=${DAYS:-365}
print=false
[ "${1:-}" = "--print" ] && print=true

command -v openssl >/dev/null || { echo "metrics-cert: openssl is needed" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
  -subj "/CN=loraplane-metrics-ca" -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -keyout "$tmp/ca.key" -out "$tmp/ca.crt" 2>/dev/null
sans=""
for b in adapter-controller router-controller; do
  sans+="DNS:$b-metrics.$ns.svc,DNS:$b-metrics.$ns.svc.cluster.local,"
done
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj "/CN=loraplane-metrics" -keyout "$tmp/tls.key" -out "$tmp/tls.csr" 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\nbasicConstraints=critical,CA:FALSE\n' "${sans%,}" >"$tmp/ext"
openssl x509 -req -in "$tmp/tls.csr" -CA "$tmp/ca.crt" -CAkey "$tmp/ca.key" -CAcreateserial \
  -days "$days" -extfile "$tmp/ext" -out "$tmp/tls.crt" 2>/dev/null
openssl verify -CAfile "$tmp/ca.crt" "$tmp/tls.crt" >/dev/null

secret() {
  "$kubectl" create secret generic loraplane-metrics-cert -n "$ns" --type kubernetes.io/tls \
    --from-file=tls.crt="$tmp/tls.crt" --from-file=tls.key="$tmp/tls.key" --from-file=ca.crt="$tmp/ca.crt" \
    --dry-run=client -o yaml
}
if $print; then
  secret
else
  secret | "$kubectl" apply --server-side --force-conflicts -f -
  echo "Secret $ns/loraplane-metrics-cert: serving certificate for ${sans%,} (valid $days days)"
fi

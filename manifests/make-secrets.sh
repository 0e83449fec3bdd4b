#!/usr/bin/env bash
# The Secrets the raw manifests (manifests/deployment.yaml) name but do not carry, since
# anything in git is public: run once, after manifests/rbac.yaml (it makes the namespace)
# and before manifests/deployment.yaml.
#
#   muster-tls          Muster's serving certificate (tls.crt, tls.key) for
#                       muster.muster-system.svc, and ca.crt: the CA that signed it and
#                       kube-scheduler's client certificate (Muster requires one from it)
#   muster-records-key  one random key Muster signs its own records with, named
#                       key-<UTC time>: a later key for a rotation sorts after it
#
# The certificates are written to DIR (default ./muster-pki, private): copy ca.crt,
# client.crt and client.key to /etc/kubernetes/pki/muster/ on every control-plane node,
# where manifests/scheduler-config.yaml names them; then keep ca.key offline (it signs
# new certificates) or delete it. Valid for DAYS (3650) days.
#
# Usage: manifests/make-secrets.sh [DIR]     (needs openssl and kubectl; KUBECTL overrides)
set -euo pipefail

DIR="${1:-muster-pki}"
DAYS="${DAYS:-3650}"
NAMESPACE=muster-system
SERVICE=muster
KUBECTL="${KUBECTL:-kubectl}"

umask 077
mkdir -p "$DIR"
cd "$DIR"

# The CA.
openssl req -x509 -new -newkey rsa:2048 -nodes -days "$DAYS" -subj "/CN=muster-ca" \
    -keyout ca.key -out ca.crt \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
# Muster's serving certificate, for the names kube-scheduler may call it by.
openssl req -new -newkey rsa:2048 -nodes -subj "/CN=$SERVICE.$NAMESPACE.svc" \
    -keyout tls.key -out tls.csr
printf '%s\n' \
    "subjectAltName=DNS:$SERVICE.$NAMESPACE.svc,DNS:$SERVICE.$NAMESPACE.svc.cluster.local,DNS:$SERVICE" \
    "extendedKeyUsage=serverAuth" "keyUsage=critical,digitalSignature,keyEncipherment" >tls.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$DAYS" \
    -extfile tls.ext -out tls.crt
# kube-scheduler's client certificate.
openssl req -new -newkey rsa:2048 -nodes -subj "/CN=kube-scheduler" \
    -keyout client.key -out client.csr
printf '%s\n' "extendedKeyUsage=clientAuth" "keyUsage=critical,digitalSignature,keyEncipherment" \
    >client.ext
openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$DAYS" \
    -extfile client.ext -out client.crt
rm -f tls.csr tls.ext client.csr client.ext ca.srl

"$KUBECTL" -n "$NAMESPACE" create secret generic muster-tls \
    --from-file=tls.crt --from-file=tls.key --from-file=ca.crt
"$KUBECTL" -n "$NAMESPACE" create secret generic muster-records-key \
    --from-literal="key-$(date -u +%Y%m%d%H%M%S)=$(head -c 32 /dev/urandom | base64)"

echo "made the Secrets muster-tls and muster-records-key in $NAMESPACE;" \
    "copy $DIR/ca.crt, client.crt and client.key to /etc/kubernetes/pki/muster/" \
    "on every control-plane node" >&2

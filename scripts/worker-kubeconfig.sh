#!/usr/bin/env bash
# Prints the kubeconfig a home cluster's Spillway operator reaches this cluster with, as the
# ServiceAccount of the chart's worker mode (docs/multi-cluster.md): the server and the token's
# CA, the token from the worker's `kubernetes.io/service-account-token` Secret. Run it against
# the worker cluster (kubectl's current context, or --kubeconfig/--context).
#
#   scripts/worker-kubeconfig.sh --namespace spillway-worker --secret spillway-worker-token \
#       [--server https://dc2.example.com:6443] [--kubeconfig FILE] [--context CTX] > dc2.kubeconfig
#
# --server: the address the home cluster reaches this API server at (default: the one in the
# current context). Needs kubectl and base64.
set -euo pipefail

ns=spillway-worker
secret=spillway-worker-token
server=""
kubectl_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --namespace|-n) ns="$2"; shift 2 ;;
    --secret) secret="$2"; shift 2 ;;
    --server) server="$2"; shift 2 ;;
    --kubeconfig|--context) kubectl_args+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "worker-kubeconfig: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

k() { kubectl "${kubectl_args[@]}" "$@"; }

# Kubernetes fills the token in shortly after the Secret is created.
token=""
for _ in $(seq 1 60); do
  token=$(k -n "$ns" get secret "$secret" -o 'jsonpath={.data.token}' 2>/dev/null || true)
  [[ -n "$token" ]] && break
  sleep 1
done
if [[ -z "$token" ]]; then
  echo "worker-kubeconfig: Secret $ns/$secret has no token after 60 s (is it a kubernetes.io/service-account-token Secret of an existing ServiceAccount?)" >&2
  exit 1
fi
ca=$(k -n "$ns" get secret "$secret" -o 'jsonpath={.data.ca\.crt}')
sa=$(k -n "$ns" get secret "$secret" -o 'jsonpath={.metadata.annotations.kubernetes\.io/service-account\.name}')
if [[ -z "$server" ]]; then
  server=$(k config view --minify --raw -o 'jsonpath={.clusters[0].cluster.server}')
fi

cat <<YAML
apiVersion: v1
kind: Config
clusters:
- name: worker
  cluster:
    server: $server
    certificate-authority-data: $ca
users:
- name: $sa
  user:
    token: $(printf '%s' "$token" | base64 -d)
contexts:
- name: worker
  context:
    cluster: worker
    user: $sa
    namespace: $ns
current-context: worker
YAML

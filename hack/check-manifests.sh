#!/usr/bin/env bash
# check-manifests.sh — manifests/kubeslurm.yaml must carry the local cluster's objects unchanged:
# every document of manifests/local/rbac.yaml and of manifests/local/webhook.yaml (each file's
# text from the first `apiVersion:` on) must appear, as one block and byte for byte, in
# manifests/kubeslurm.yaml; in the webhook's, each local `url: https://127.0.0.1:9443/<path>`
# stands as `service: {namespace: kubeslurm-system, name: kubeslurm-webhook, path: /<path>}`.
set -euo pipefail
cd "$(dirname "$0")/.."
install=manifests/kubeslurm.yaml
# check FILE [SED-SCRIPT]
check() {
  local body
  body=$(sed -n '/^apiVersion:/,$p' "$1" | sed -e "${2:-}")
  [ -n "$body" ] || { echo "$1: no documents" >&2; exit 1; }
  if [[ "$(cat "$install")" != *"$body"* ]]; then
    echo "$install does not contain the objects of $1 unchanged; copy them over:" >&2
    diff <(printf '%s\n' "$body") "$install" >&2 || true
    exit 1
  fi
  echo "ok: $install carries $1 unchanged"
}
check manifests/local/rbac.yaml
check manifests/local/webhook.yaml \
  's|url: https://127\.0\.0\.1:9443\(/[^ ]*\)|service: {namespace: kubeslurm-system, name: kubeslurm-webhook, path: \1}|'

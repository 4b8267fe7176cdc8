#!/usr/bin/env bash
# check-manifests.sh — manifests/kubeslurm.yaml must carry the local cluster's RBAC unchanged:
# every document of manifests/local/rbac.yaml (its text from the first `apiVersion:` on)
# must appear, as one block and byte for byte, in manifests/kubeslurm.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
local_rbac=manifests/local/rbac.yaml install=manifests/kubeslurm.yaml
body=$(sed -n '/^apiVersion:/,$p' "$local_rbac")
[ -n "$body" ] || { echo "$local_rbac: no documents" >&2; exit 1; }
if [[ "$(cat "$install")" != *"$body"* ]]; then
  echo "$install does not contain the RBAC of $local_rbac unchanged; copy it over:" >&2
  diff <(printf '%s\n' "$body") "$install" >&2 || true
  exit 1
fi
echo "ok: $install carries $local_rbac unchanged"

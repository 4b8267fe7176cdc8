#!/usr/bin/env bash
# crds.sh [--check] — the third-party CRDs kubeslurm reads, copied from the Go modules that
# define them (pinned in go.mod), into manifests/crds/ and charts/kubeslurm/crds/ (helm installs
# them first). --check fails when a copy differs.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A crds=(
  [scheduling.x-k8s.io_podgroups.yaml]="sigs.k8s.io/scheduler-plugins config/crd/bases/scheduling.x-k8s.io_podgroups.yaml"
)
rc=0
for name in "${!crds[@]}"; do
  read -r module path <<<"${crds[$name]}"
  src="$(go list -m -f '{{.Dir}}' "$module")/$path"
  [ -f "$src" ] || go mod download "$module"
  for dir in manifests/crds charts/kubeslurm/crds; do
    if [ "${1:-}" = --check ]; then
      cmp -s "$src" "$dir/$name" || { echo "$dir/$name differs from $module's $path; run hack/crds.sh" >&2; rc=1; }
    else
      install -m 0644 "$src" "$dir/$name"
    fi
  done
done
[ $rc -eq 0 ] && [ "${1:-}" = --check ] && echo "ok: manifests/crds and charts/kubeslurm/crds match their modules"
exit $rc

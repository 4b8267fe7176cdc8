#!/usr/bin/env bash
# generate.sh [--check] — kubeslurm's own CRDs (manifests/crds/slurm.kubeslurm.io_*.yaml, and
# the same files in charts/kubeslurm/crds/ for helm to install) and DeepCopy methods
# (api/*/zz_generated.deepcopy.go), by controller-gen built from the scratch module
# hack/tools/controller-gen. --check generates into a temporary copy and fails when
# the committed files differ.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cg="$root/bin/controller-gen"
version=$(cd hack/tools/controller-gen && go list -m -f '{{.Version}}' sigs.k8s.io/controller-tools)
if [ ! -x "$cg" ] || [ "$(cat "$root/bin/.controller-gen.version" 2>/dev/null)" != "$version" ]; then
  mkdir -p "$root/bin"
  (cd hack/tools/controller-gen && go build -o "$cg" sigs.k8s.io/controller-tools/cmd/controller-gen)
  echo "$version" >"$root/bin/.controller-gen.version"
fi
gen() { # gen CRD-DIR: DeepCopy in place under api/, CRDs into CRD-DIR
  "$cg" object paths=./api/... crd paths=./api/... output:crd:artifacts:config="$1"
}
if [ "${1:-}" != --check ]; then
  gen manifests/crds
  cp manifests/crds/slurm.kubeslurm.io_*.yaml charts/kubeslurm/crds/
  exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# DeepCopy is written beside the types: generate in a copy of the module's api/ and go.mod.
cp -r api go.mod go.sum "$tmp/"
(cd "$tmp" && mkdir crds && gen crds)
rc=0
for f in "$tmp"/api/*/zz_generated.deepcopy.go; do
  rel=${f#"$tmp/"}
  cmp -s "$f" "$rel" || { echo "$rel is stale; run make generate" >&2; rc=1; }
done
for f in "$tmp"/crds/*.yaml; do
  for rel in manifests/crds/$(basename "$f") charts/kubeslurm/crds/$(basename "$f"); do
    cmp -s "$f" "$rel" || { echo "$rel is stale; run make generate" >&2; rc=1; }
  done
done
for f in manifests/crds/slurm.kubeslurm.io_*.yaml; do
  [ -e "$tmp/crds/$(basename "$f")" ] || { echo "$f has no type in api/; run make generate" >&2; rc=1; }
done
[ $rc -eq 0 ] && echo "ok: CRDs and DeepCopy match api/"
exit $rc

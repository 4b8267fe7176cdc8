#!/usr/bin/env bash
# build-tools.sh [helm] — builds the local cluster's Kubernetes tools from Go modules into ./bin
# (with `helm`: only helm, which `make unit` needs).
# Each tool is rebuilt only when its pinned version (deploy/local/versions.env) changes:
# a stamp file beside the binary records the version it was built from. Go's module and
# build caches stay in their default places so a later run on this machine reuses them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/deploy/local/versions.env"
bin="$root/bin"
mkdir -p "$bin"

step() { printf '==> %s\n' "$*"; }

# fresh NAME VERSION: true when bin/NAME exists and was built from VERSION.
fresh() { [ -x "$bin/$1" ] && [ "$(cat "$bin/.$1.version" 2>/dev/null)" = "$2" ]; }
stamp() { echo "$2" >"$bin/.$1.version"; }

if ! fresh helm "$HELM_VERSION"; then
  step "building helm $HELM_VERSION"
  GOBIN="$bin" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  stamp helm "$HELM_VERSION"
fi
[ "${1:-}" != helm ] || exit 0

k8s_tools=(kube-apiserver kube-controller-manager kubectl)
need=()
for t in "${k8s_tools[@]}"; do fresh "$t" "$K8S_VERSION" || need+=("$t"); done
if [ ${#need[@]} -gt 0 ]; then
  gomod_k8s=$(cd "$root" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  if [ "$gomod_k8s" != "$K8S_VERSION" ]; then
    echo "go.mod has k8s.io/kubernetes $gomod_k8s but versions.env pins $K8S_VERSION" >&2
    exit 1
  fi
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  pkg=k8s.io/component-base/version
  step "building ${need[*]} $K8S_VERSION (first build takes ~10 min on 2 cores)"
  pkgs=(); for t in "${need[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$t"); done
  (cd "$root" && go build -o "$bin/" \
    -ldflags "-X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor" \
    "${pkgs[@]}")
  for t in "${need[@]}"; do stamp "$t" "$K8S_VERSION"; done
fi

if ! fresh etcd "$ETCD_VERSION"; then
  step "building etcd $ETCD_VERSION"
  (cd "$root/hack/tools/etcd" && go build -o "$bin/etcd" go.etcd.io/etcd/server/v3)
  stamp etcd "$ETCD_VERSION"
fi

if ! fresh kwok "$KWOK_VERSION"; then
  step "building kwok $KWOK_VERSION"
  GOBIN="$bin" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  stamp kwok "$KWOK_VERSION"
fi
# JobSet's and LeaderWorkerSet's controllers, each from a scratch module under hack/tools
# (their dependencies differ from ours), like etcd.
if ! fresh jobset-controller "$JOBSET_VERSION"; then
  step "building the JobSet controller $JOBSET_VERSION"
  (cd "$root/hack/tools/jobset" && go build -o "$bin/jobset-controller" sigs.k8s.io/jobset)
  stamp jobset-controller "$JOBSET_VERSION"
fi
if ! fresh lws-controller "$LWS_VERSION"; then
  step "building the LeaderWorkerSet controller $LWS_VERSION"
  (cd "$root/hack/tools/lws" && go build -o "$bin/lws-controller" sigs.k8s.io/lws/cmd)
  stamp lws-controller "$LWS_VERSION"
fi
step "tools ready in $bin"

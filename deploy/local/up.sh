#!/usr/bin/env bash
# up.sh — brings up the local kubeslurm system on this machine, all on 127.0.0.1:
#   etcd, kube-apiserver, kube-controller-manager, kwok with NODES fake nodes (default 4),
#   Slurm (slurmctld, slurmrestd, one dynamic slurmd per node) from the Slurm root filesystem,
#   then kubeslurm's scheduler and controller if they are built (SKIP_COMPONENTS=1 skips them).
# Idempotent: a component is started only when its PID file names no live process, and
# running it again on a running system changes nothing. A "fresh" start (etcd, or slurmctld,
# not running) wipes that side's state first, so every `up` after `down` is a clean cluster.
# A running system keeps any extra nodes when NODES is lowered (down.sh stops them all).
# Runtime files: .local/ (or $KUBESLURM_RUN). Needs root, the tools in bin/ (make tools) and
# the Slurm root (make slurm-root).
set -euo pipefail
# NODES defaults to 4 here (lib.sh would default to the count of the last `up`).
export NODES=${NODES:-4}
. "$(dirname "$0")/lib.sh"
t0=$(date +%s)
SKIP_COMPONENTS=${SKIP_COMPONENTS:-0}

# ---------------------------------------------------------------------------- preflight
[ "$(id -u)" = 0 ] || die "up.sh needs root (chroot, unshare --mount)"
for t in etcd kube-apiserver kube-controller-manager kubectl kwok; do
  [ -x "$BIN/$t" ] || die "missing $BIN/$t: run deploy/local/build-tools.sh (make tools)"
done
[ -x "$SLURM_ROOT/usr/sbin/slurmrestd" ] && [ -f "$SLURM_ROOT/.complete" ] ||
  die "no Slurm root at $SLURM_ROOT: run deploy/local/slurm-root.sh (make slurm-root)"
for c in curl openssl unshare setsid chroot ss base64; do
  command -v "$c" >/dev/null || die "missing command: $c"
done
mkdir -p "$PIDS" "$LOGS" "$RUN/bin"
echo "$NODES" | write_if_changed "$RUN/nodes"
step "local cluster in $RUN ($NODES nodes, Slurm root $SLURM_ROOT)"

# ---------------------------------------------------------------------------- Kubernetes
if ! alive etcd; then
  step "fresh Kubernetes: no etcd running, so starting from an empty etcd"
  for c in controller scheduler "${WORKLOAD_CONTROLLERS[@]}" kwok controller-manager apiserver; do
    if alive "$c"; then comp_stop "$c"; fi
  done
  rm -rf "$RUN/etcd"
fi

step "etcd (127.0.0.1:2379)"
comp_start etcd

step "kube-apiserver ($APISERVER_URL)"
comp_start apiserver
write_kubeconfig "$RUN/admin.kubeconfig" kubeslurm-admin "$(admin_token)"
info "admin kubeconfig: $RUN/admin.kubeconfig"

step "kube-controller-manager"
comp_start controller-manager

step "kwok (fake nodes and pods)"
comp_start kwok

step "CRDs of the workloads kubeslurm groups (manifests/crds)"
kc apply -f "$REPO/manifests/crds/" | sed 's/^/    /'
step "stand-in of NVIDIA's ComputeDomain CRD (manifests/local/computedomain-crd.yaml; no NVIDIA driver here)"
kc apply -f "$REPO/manifests/local/computedomain-crd.yaml" | sed 's/^/    /'
step "JobSet $JOBSET_VERSION and LeaderWorkerSet $LWS_VERSION: CRDs from their modules, controllers, webhooks"
# Server-side: these CRDs are larger than client-side apply's last-applied annotation allows.
kc apply --server-side --force-conflicts \
  -f "$(workload_module_dir jobset)/config/components/crd/bases/" \
  -f "$(workload_module_dir lws)/config/crd/bases/" | sed 's/^/    /'
# The scheduler discovers the APIs it can read when it starts: have them served by then.
# (kubectl wait errors out on a CRD whose status is not written yet: try again.)
for i in $(seq 30); do
  kc wait --for=condition=Established crd --all --timeout=60s >/dev/null 2>&1 && break
  [ "$i" -lt 30 ] || die "CRDs not Established"
  sleep 1
done
for c in "${WORKLOAD_CONTROLLERS[@]}"; do comp_start "$c"; done
sed "s|@CA_BUNDLE@|$(base64 -w0 "$WORKLOAD_WEBHOOK_CERTS/ca.crt")|" "$LOCAL_DIR/workload-webhooks.yaml.tmpl" |
  kc apply -f - | sed 's/^/    /'

step "namespace $SLURM_NS, service accounts, RBAC (manifests/local/rbac.yaml)"
kc apply -f "$REPO/manifests/local/rbac.yaml" | sed 's/^/    /'
step "admission webhook configurations and certificate Secret (manifests/local/webhook.yaml)"
kc apply -f "$REPO/manifests/local/webhook.yaml" | sed 's/^/    /'

step "$NODES fake nodes node-1..node-$NODES"
for ((i = 1; i <= NODES; i++)); do kwok_node_manifest "node-$i" "kubeslurm.io/slurm-node: \"true\""; done | kc apply -f - | sed 's/^/    /'
kc wait --for=condition=Ready node -l kubeslurm.io/slurm-node=true --timeout=90s | sed 's/^/    /'
# No node.kubernetes.io/not-ready taint (the API server runs without TaintNodesByCondition and
# no nodelifecycle controller would lift it); drop one a node may carry from elsewhere.
for n in $(kc get nodes -l kubeslurm.io/slurm-node=true -o jsonpath='{range .items[?(@.spec.taints)]}{.metadata.name}{" "}{end}'); do
  kc taint node "$n" node.kubernetes.io/not-ready:NoSchedule- 2>/dev/null | sed 's/^/    /' || true
done
# The default ServiceAccount (made by kube-controller-manager) must exist before pods can be.
for ((i = 0; ; i++)); do
  kc get serviceaccount default -n default >/dev/null 2>&1 && break
  [ "$i" -lt 60 ] || die "no ServiceAccount default/default after 30 s (see $(comp_log controller-manager))"
  sleep 0.5
done

step "kubeconfigs of the scheduler and controller service accounts"
# ensure_sa_kubeconfig SHORTNAME: keeps a kubeconfig whose token still works, else mints one.
ensure_sa_kubeconfig() {
  local f=$RUN/$1.kubeconfig sa=kubeslurm-$1 want who tok payload exp
  want=system:serviceaccount:$SLURM_NS:$sa
  who=$("$BIN/kubectl" --kubeconfig "$f" auth whoami -o jsonpath='{.status.userInfo.username}' 2>/dev/null || true)
  if [ -s "$f" ] && [ "$who" = "$want" ]; then
    info "$f: kept (token still valid)"
    return 0
  fi
  tok=$(kc create token "$sa" -n "$SLURM_NS" --duration=8760h)
  payload=$(cut -d. -f2 <<<"$tok" | tr '_-' '/+')
  while [ $((${#payload} % 4)) -ne 0 ]; do payload+='='; done
  exp=$(base64 -d <<<"$payload" 2>/dev/null | sed -n 's/.*"exp":\([0-9]*\).*/\1/p')
  [ -n "$exp" ] && [ $((exp - $(date +%s))) -gt $((8700 * 3600)) ] ||
    warn "the token of $sa expires sooner than 8760h (exp=$exp)"
  write_kubeconfig "$f" "$sa" "$tok"
  info "$f: new token for $want, valid until $(date -u -d "@$exp" +%Y-%m-%dT%H:%MZ)"
}
ensure_sa_kubeconfig scheduler
ensure_sa_kubeconfig controller
# check_can KUBECONFIG yes|no VERB RESOURCE [kubectl auth can-i flags...]
check_can() {
  local f=$1 want=$2 got
  shift 2
  got=$("$BIN/kubectl" --kubeconfig "$f" auth can-i "$@" 2>/dev/null || true)
  [ "$got" = "$want" ] || die "$(basename "$f"): 'can-i $*' answered '$got', expected '$want'"
}
s=$RUN/scheduler.kubeconfig c=$RUN/controller.kubeconfig
check_can "$s" yes create pods --subresource=binding
check_can "$s" yes patch pods
check_can "$s" yes create events.events.k8s.io
check_can "$s" yes update leases.coordination.k8s.io -n "$SLURM_NS"
check_can "$s" no delete nodes
check_can "$s" no create secrets
check_can "$s" no '*' '*'
check_can "$c" yes delete pods
check_can "$c" yes patch pods --subresource=status
check_can "$c" yes patch nodes --subresource=status
check_can "$c" yes create events
check_can "$c" yes create leases.coordination.k8s.io -n "$SLURM_NS"
check_can "$c" no create pods --subresource=binding
check_can "$c" no delete nodes
check_can "$c" no get secrets
check_can "$c" no list secrets -n "$SLURM_NS"
check_can "$c" yes update secrets/kubeslurm-webhook-cert -n "$SLURM_NS"
check_can "$c" yes get secrets/kubeslurm-slurm-signing-key -n "$SLURM_NS"
check_can "$c" no get secrets/kubeslurm-slurm-signing-key -n default
check_can "$c" yes update validatingwebhookconfigurations/kubeslurm
check_can "$c" no update validatingwebhookconfigurations/other
check_can "$c" yes create computedomains.resource.nvidia.com -n default
check_can "$c" no update computedomains.resource.nvidia.com -n default
check_can "$c" no delete computedomains.resource.nvidia.com -n default
check_can "$c" no '*' '*'
info "service-account kubeconfigs work and are not admin"

# ---------------------------------------------------------------------------- Slurm
if ! alive slurmctld; then
  step "fresh Slurm: no slurmctld running, so new config and empty state"
  for c in controller scheduler $(all_components | grep '^slurmd-node-' | sort -t- -k3 -rn) slurmrestd; do
    if alive "$c"; then comp_stop "$c"; fi
  done
  slurm_clear_state
  slurm_write_config
fi
step "slurmctld (127.0.0.1:6817)"
comp_start slurmctld
step "slurmrestd ($SLURMRESTD_URL, as user slurmrestd; requests act as their token's user)"
comp_start slurmrestd
step "$NODES dynamic slurmd (node-1..node-$NODES, ports 6831..$((6830 + NODES)))"
for ((i = 1; i <= NODES; i++)); do comp_start "slurmd-node-$i"; done

# All nodes up: idle after a fresh start; otherwise anything responding (jobs may run).
for ((t = 0; ; t++)); do
  states=$(slurm sinfo -h -N -o '%N %t' 2>/dev/null || true)
  bad=0
  for ((i = 1; i <= NODES; i++)); do
    st=$(awk -v n="node-$i" '$1 == n { print $2; exit }' <<<"$states")
    case $st in idle | mix | alloc | comp) ;; *) bad=1 ;; esac
  done
  [ "$bad" = 0 ] && break
  [ "$t" -lt 60 ] || die "Slurm nodes not all up after 30 s: $(tr '\n' ' ' <<<"$states")"
  sleep 0.5
done
slurm sinfo | sed 's/^/    /'

step "slurmrestd answers an authenticated ping"
ping_json=$(slurmrestd_get ping) || die "GET $SLURMRESTD_URL/slurm/$SLURM_API_VERSION/ping failed (see $(comp_log slurmrestd))"
grep -q '"pinged": *"UP"' <<<"$ping_json" || die "unexpected ping answer: $ping_json"
info "GET /slurm/$SLURM_API_VERSION/ping: $(tr -d ' \n' <<<"$ping_json" | grep -o '"pings":\[[^]]*\]')"

step "wrappers in $RUN/bin and $RUN/env"
for cmd in scontrol squeue sinfo sbatch scancel sacct srun sdiag; do
  write_if_changed "$RUN/bin/$cmd" 0755 <<EOF
#!/bin/sh
# Generated by deploy/local/up.sh: Slurm's $cmd, run inside the Slurm root (working
# directory /tmp there; a batch script can come on stdin). Leaves no mounts behind.
exec '$LOCAL_DIR/slurm-exec.sh' $cmd "\$@"
EOF
done
# Where the pod runner finds the Slurm images' filesystem (e2e tests start it).
ln -sfn "$SLURM_ROOT" "$RUN/slurm-root"
write_if_changed "$RUN/env" 0644 <<EOF
# Generated by deploy/local/up.sh. Use: source $RUN/env
export KUBECONFIG='$RUN/admin.kubeconfig'
case ":\$PATH:" in *':$RUN/bin:'*) ;; *) export PATH='$RUN/bin':'$BIN':"\$PATH" ;; esac
export SLURMRESTD_URL='$SLURMRESTD_URL'
export SLURM_JWT_KEY_FILE='$JWT_KEY_FILE'
export SLURM_USER='$SLURM_USER'
export KUBESLURM_RUN='$RUN'
EOF
info "$(ls "$RUN/bin" | tr '\n' ' ')"

# ---------------------------------------------------------------------------- our components
if [ "$SKIP_COMPONENTS" = 1 ]; then
  step "kubeslurm scheduler and controller: skipped (SKIP_COMPONENTS=1)"
elif [ ! -x "$BIN/kubeslurm-scheduler" ] || [ ! -x "$BIN/kubeslurm-controller" ]; then
  step "kubeslurm scheduler and controller: skipped, $BIN/kubeslurm-scheduler or $BIN/kubeslurm-controller is not built (make build)"
else
  step "kubeslurm-scheduler (https://127.0.0.1:10259)"
  comp_start scheduler
  step "kubeslurm-controller (metrics 127.0.0.1:8081, health 127.0.0.1:8082)"
  comp_start controller
  if [ -f "$REPO/examples/pod.yaml" ]; then
    step "example: examples/pod.yaml"
    kc apply -f "$REPO/examples/pod.yaml" | sed 's/^/    /'
    if kc wait --for=jsonpath='{.status.phase}'=Running -f "$REPO/examples/pod.yaml" --timeout=60s >/dev/null 2>&1; then
      kc get pod -o wide | sed 's/^/    /'
      slurm squeue | sed 's/^/    /'
    else
      warn "the example pod is not Running after 60 s:"
      kc get -f "$REPO/examples/pod.yaml" -o wide >&2 || true
      kc get events --sort-by=.lastTimestamp 2>/dev/null | tail -n 10 >&2 || true
      slurm squeue >&2 || true
    fi
  fi
fi

# ---------------------------------------------------------------------------- done
step "up in $(($(date +%s) - t0)) s"
cat <<EOF

  source $RUN/env
  kubectl get nodes                   # $NODES kwok nodes
  kubectl get pods -A -o wide
  sinfo; squeue                       # Slurm, run inside the Slurm root
  scontrol show node node-1
  sbatch -N1 --wrap 'sleep 30'        # a Slurm job (as root, in /tmp of the Slurm root)
  curl -H "X-SLURM-USER-NAME: slurm" -H "X-SLURM-USER-TOKEN: \$(scontrol token username=slurm lifespan=3600 | cut -d= -f2)" \\
       \$SLURMRESTD_URL/slurm/$SLURM_API_VERSION/ping
  deploy/local/status.sh              # what runs; logs in $LOGS
  deploy/local/down.sh                # stop everything
EOF

# shellcheck shell=bash disable=SC2034
# Shared by up.sh, down.sh, status.sh, component.sh and slurm-exec.sh (sourced, not run).
# Every path is computed from this file's location; runtime files live in $RUN
# (default <repo>/.local, override with KUBESLURM_RUN).
set -euo pipefail

LOCAL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$LOCAL_DIR/../.." && pwd)
. "$LOCAL_DIR/versions.env"
BIN=$REPO/bin
RUN=${KUBESLURM_RUN:-$REPO/.local}
mkdir -p "$RUN"
RUN=$(cd "$RUN" && pwd)
PIDS=$RUN/pids
LOGS=$RUN/logs
CERTS=$RUN/certs
# Number of fake nodes (and slurmd): NODES, else what the last `up` used, else 4.
NODES=${NODES:-$(cat "$RUN/nodes" 2>/dev/null || echo 4)}
[[ $NODES =~ ^[1-9][0-9]*$ ]] || { echo "NODES must be a positive number, not '$NODES'" >&2; exit 1; }
SLURM_ROOT=${KUBESLURM_SLURM_ROOT:-${KUBESLURM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubeslurm}/slurm-root-$SLURM_SUITE}
APISERVER_URL=https://127.0.0.1:6443
SLURMRESTD_URL=http://127.0.0.1:6820
SLURM_API_VERSION=v0.0.44
SLURM_USER=slurm
SLURM_NS=kubeslurm-system
JWT_KEY_FILE=$RUN/slurm/jwt_hs256.key
# Written by the controller from node labels (docs/topology.md); slurmctld reads it next to
# slurm.conf. Derived state: removed with Slurm's state, so a cluster brought up from a tree
# whose controller does not write it never reads a stale one.
TOPOLOGY_FILE=$SLURM_ROOT/etc/slurm/topology.yaml
# Fake GPUs per node: the kwok nodes advertise nvidia.com/gpu, each slurmd as many
# file-backed gres/gpu (slurm-exec.sh --fake-gpus).
GPUS_PER_NODE=4
# Where the DCGM job-mapping prolog writes (the GPU operator's default hpcJobMapping
# directory); a tmpfs of each slurmd's own, as on a real node.
DCGM_JOB_MAPPING_DIR=/var/lib/dcgm-exporter/job-mapping

# Start order; down.sh stops in reverse. slurmd-node-<i> sit between slurmrestd and scheduler.
K8S_COMPONENTS=(etcd apiserver controller-manager kwok)
# JobSet's and LeaderWorkerSet's own controllers (and admission webhooks), as a user of those
# workloads installs them; kubeslurm places their pods as groups.
WORKLOAD_CONTROLLERS=(jobset-controller lws-controller)
SLURM_DAEMONS=(slurmctld slurmrestd)
OUR_COMPONENTS=(scheduler controller)
# The local SlurmCluster (slurmcluster.sh, `make up-slurmcluster`): a pod runner on a node of
# its own (slurmctld, slurmrestd, the release's scheduler and controller) and one adopting
# each kwok node of its workers; their components are podrunner-<node>.
SLURMCLUSTER_HOST=slurm-host
SLURMCLUSTER_WORKERS=(slurm-worker-1 slurm-worker-2)

step() { printf '==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
warn() { printf 'WARNING: %s\n' "$*" >&2; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

# All components in start order, including every slurmd that has a PID file or is wanted.
all_components() {
  local names=("${K8S_COMPONENTS[@]}" "${WORKLOAD_CONTROLLERS[@]}" "${SLURM_DAEMONS[@]}") i f n
  local -A seen=()
  for ((i = 1; i <= NODES; i++)); do names+=("slurmd-node-$i"); seen["slurmd-node-$i"]=1; done
  for f in "$PIDS"/slurmd-node-*.pid; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .pid)
    [ -n "${seen[$n]:-}" ] || names+=("$n")
  done
  names+=("${OUR_COMPONENTS[@]}")
  # The local SlurmCluster's pod runners (slurmcluster.sh), when started: last, so that
  # down.sh stops them first.
  for f in "$PIDS"/podrunner-*.pid; do [ -e "$f" ] && names+=("$(basename "$f" .pid)"); done
  printf '%s\n' "${names[@]}"
}

# The word every process of a component has in its command line (guards against PID reuse).
comp_binary() {
  case $1 in
    etcd) echo etcd ;;
    apiserver) echo kube-apiserver ;;
    controller-manager) echo kube-controller-manager ;;
    kwok) echo kwok ;;
    jobset-controller) echo jobset-controller ;;
    lws-controller) echo lws-controller ;;
    slurmctld) echo slurmctld ;;
    slurmrestd) echo slurmrestd ;;
    slurmd-node-*) echo "slurmd" ;;
    scheduler) echo kubeslurm-scheduler ;;
    controller) echo kubeslurm-controller ;;
    podrunner-*) echo kubeslurm-podrunner ;;
    *) return 1 ;;
  esac
}

valid_component() {
  comp_binary "$1" >/dev/null 2>&1 &&
    { [[ $1 != slurmd-node-* ]] || [[ $1 =~ ^slurmd-node-[0-9]+$ ]]; } &&
    { [[ $1 != podrunner-* ]] || [[ $1 =~ ^podrunner-[a-z0-9]([a-z0-9-]*[a-z0-9])?$ ]]; }
}

pidfile() { echo "$PIDS/$1.pid"; }

# kwok_node_manifest NAME [LABEL...]: a kwok node of the local cluster's size, with the GPU
# labels and resources of its fake GPUs, and each "key: value" LABEL line too.
kwok_node_manifest() {
  local name=$1 label
  shift
  cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $name
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
EOF
  for label in "$@"; do echo "    $label"; done
  cat <<EOF
    kubernetes.io/hostname: $name
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
    # What the GPU operator's feature discovery labels a GPU node with (fake GPUs, see
    # GPUS_PER_NODE: slurmd has as many gres/gpu).
    nvidia.com/gpu.present: "true"
    nvidia.com/gpu.count: "$GPUS_PER_NODE"
    nvidia.com/gpu.product: Fake-GPU
status:
  capacity:
    cpu: "4"
    memory: 8Gi
    pods: "110"
    nvidia.com/gpu: "$GPUS_PER_NODE"
  allocatable:
    cpu: "4"
    memory: 8Gi
    pods: "110"
    nvidia.com/gpu: "$GPUS_PER_NODE"
EOF
}

# comp_pid NAME: prints the PID if the component's PID file names a live process of it.
comp_pid() {
  local f pid state cmd _
  f=$(pidfile "$1")
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/stat" ] || return 1
  state=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ "$state" != Z ] || return 1
  # The command line reads empty for an instant while the process execs (slurm-exec.sh
  # execs five times on its way to the daemon): look again before calling it someone else.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || cmd=
    # shellcheck disable=SC2053
    if [[ "$cmd " == $(comp_match "$1") ]]; then echo "$pid"; return 0; fi
    [ -z "$cmd" ] && [ -r "/proc/$pid/stat" ] || return 1
    sleep 0.02
  done
  return 1
}
alive() { comp_pid "$1" >/dev/null; }

# kubectl as admin.
kc() { "$BIN/kubectl" --kubeconfig "$RUN/admin.kubeconfig" "$@"; }

# Slurm commands inside the Slurm root (no mounts left behind, see slurm-exec.sh).
slurm() { "$LOCAL_DIR/slurm-exec.sh" --clean "$@"; }

# uid:gid of a user (default slurm) inside the Slurm root.
slurm_ids() { awk -F: -v u="${1:-slurm}" '$1 == u { print $3 ":" $4 }' "$SLURM_ROOT/etc/passwd"; }

# write_if_changed FILE [MODE] < content: replaces FILE atomically, only if its content differs.
write_if_changed() {
  local f=$1 mode=${2:-0644} tmp
  tmp=$(mktemp "$f.XXXXXX")
  cat >"$tmp"
  chmod "$mode" "$tmp"
  if [ -f "$f" ] && cmp -s "$tmp" "$f"; then rm -f "$tmp"; return 0; fi
  mv -f "$tmp" "$f"
}

# write_kubeconfig FILE USER TOKEN
write_kubeconfig() {
  local ca
  ca=$(base64 -w0 "$CERTS/apiserver.crt")
  write_if_changed "$1" 0600 <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kubeslurm
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $ca
users:
- name: $2
  user:
    token: $3
contexts:
- name: kubeslurm
  context:
    cluster: kubeslurm
    user: $2
current-context: kubeslurm
EOF
}

# A JWT for slurmrestd, minted by slurmctld.
slurm_token() {
  slurm scontrol token username="$SLURM_USER" lifespan="${1:-3600}" | sed -n 's/^SLURM_JWT=//p'
}

# slurmrestd GET PATH (relative to /slurm/$SLURM_API_VERSION/), with a fresh token.
slurmrestd_get() {
  local tok
  tok=$(slurm_token 600) || return 1
  [ -n "$tok" ] || return 1
  curl -fsS --max-time 10 -H "X-SLURM-USER-NAME: $SLURM_USER" -H "X-SLURM-USER-TOKEN: $tok" \
    "$SLURMRESTD_URL/slurm/$SLURM_API_VERSION/$1"
}

# ---------------------------------------------------------------------------------------
# Components: how each one is prepared, started, checked for readiness and stopped.

comp_log() { echo "$LOGS/$1.log"; }

# comp_match NAME: a glob its live process's command line matches (guards against PID reuse).
comp_match() {
  case $1 in
    slurmd-node-*) echo "*slurmd* -N node-${1#slurmd-node-} *" ;;
    podrunner-*) echo "*kubeslurm-podrunner* --node-name ${1#podrunner-} *" ;;
    *) echo "*$(comp_binary "$1")*" ;;
  esac
}

admin_token() { cut -d, -f1 "$RUN/tokens.csv"; }

# Generated once per $RUN and kept: admin token, service-account signing key pair.
ensure_k8s_secrets() {
  mkdir -p "$CERTS"
  chmod 700 "$CERTS"
  if [ ! -s "$RUN/tokens.csv" ]; then
    (umask 077; echo "$(openssl rand -hex 32),kubeslurm-admin,kubeslurm-admin,\"system:masters\"" >"$RUN/tokens.csv")
  fi
  if [ ! -s "$CERTS/sa.key" ] || [ ! -s "$CERTS/sa.pub" ]; then
    openssl genrsa -out "$CERTS/sa.key.tmp" 2048 2>/dev/null
    openssl rsa -in "$CERTS/sa.key.tmp" -pubout -out "$CERTS/sa.pub" 2>/dev/null
    chmod 600 "$CERTS/sa.key.tmp" && mv "$CERTS/sa.key.tmp" "$CERTS/sa.key"
  fi
}

# Slurm's keys, made once in the Slurm root (random bytes, owned by slurm, 0600); the JWT key
# is copied to $JWT_KEY_FILE (root only) for our Go components, which mint their own tokens.
ensure_slurm_keys() {
  local etc=$SLURM_ROOT/etc/slurm ids
  ids=$(slurm_ids)
  [ -s "$etc/slurm.key" ] || head -c 1024 /dev/urandom >"$etc/slurm.key"
  [ -s "$etc/jwt_hs256.key" ] || head -c 32 /dev/urandom >"$etc/jwt_hs256.key"
  chown "$ids" "$etc/slurm.key" "$etc/jwt_hs256.key"
  chmod 600 "$etc/slurm.key" "$etc/jwt_hs256.key"
  mkdir -p "$RUN/slurm"
  chmod 700 "$RUN/slurm"
  write_if_changed "$JWT_KEY_FILE" 0600 <"$etc/jwt_hs256.key"
}

# Writes slurm.conf and cgroup.conf into the Slurm root (and copies into $RUN/slurm) and
# makes the directories the daemons need.
slurm_write_config() {
  local R=$SLURM_ROOT ids
  ids=$(slurm_ids)
  [ -n "$ids" ] || die "no slurm user in $R/etc/passwd"
  ensure_slurm_keys
  # slurmrestd's own user (it may run neither as root nor as SlurmUser).
  if [ -z "$(slurm_ids slurmrestd)" ]; then
    chroot "$R" /usr/sbin/useradd --system --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin slurmrestd
  fi
  write_if_changed "$R/etc/slurm/slurm.conf" 0644 <"$LOCAL_DIR/slurm.conf.tmpl"
  write_if_changed "$R/etc/slurm/cgroup.conf" 0644 <<'CONF'
# No cgroup filesystem inside the Slurm root: cgroups off.
CgroupPlugin=disabled
CONF
  # Empty for all: each slurmd binds its own gres.conf over it (slurm-exec.sh --fake-gpus).
  write_if_changed "$R/etc/slurm/gres.conf" 0644 <<<'# Each slurmd of the local cluster sees its own (slurm-exec.sh --fake-gpus).'
  # The prolog/epilog scripts the controller ships (pkg/dcgmjobmap), as slurm.conf names them.
  mkdir -p "$R/etc/slurm/prolog.d" "$R/etc/slurm/epilog.d"
  write_if_changed "$R/etc/slurm/prolog.d/dcgm-job-mapping.sh" 0755 <"$REPO/pkg/dcgmjobmap/prolog.sh"
  write_if_changed "$R/etc/slurm/epilog.d/dcgm-job-mapping.sh" 0755 <"$REPO/pkg/dcgmjobmap/epilog.sh"
  cp "$R/etc/slurm/slurm.conf" "$R/etc/slurm/cgroup.conf" "$R/etc/slurm/gres.conf" "$RUN/slurm/"
  mkdir -p "$R/var/spool/slurmctld" "$R/run/slurmctld" "$R/run/slurmd" "$R/var/spool/slurmd" "$R/var/log/slurm"
  # slurmctld wants its state and run directories owned by SlurmUser (slurm).
  chown "$ids" "$R/var/spool/slurmctld" "$R/run/slurmctld" "$R/var/log/slurm"
  chmod 700 "$R/var/spool/slurmctld"
}

# Forget all Slurm state (jobs, dynamic nodes): only while no Slurm daemon runs.
slurm_clear_state() {
  local R=$SLURM_ROOT
  rm -rf "${R:?}/var/spool/slurmctld/"* "${R:?}/var/spool/slurmd/"* "${R:?}/tmp/slurm-"*.out
  rm -f "$TOPOLOGY_FILE"
}

render_scheduler_config() {
  sed -e "s|@KUBECONFIG@|$RUN/scheduler.kubeconfig|" -e "s|@JWT_KEY_FILE@|$JWT_KEY_FILE|" \
    "$LOCAL_DIR/scheduler-config.yaml.tmpl" | write_if_changed "$RUN/scheduler-config.yaml" 0644
}

# The JobSet and LWS controllers serve their admission webhooks on 127.0.0.1 with one serving
# certificate made here (their own cert rotation assumes an in-cluster Service).
WORKLOAD_WEBHOOK_CERTS=$CERTS/workload-webhooks

# workload_controller_port NAME webhook|health
workload_controller_port() {
  case $1:$2 in
    jobset-controller:webhook) echo 9444 ;;
    jobset-controller:health) echo 8091 ;;
    lws-controller:webhook) echo 9445 ;;
    lws-controller:health) echo 8092 ;;
  esac
}

# A CA and a serving certificate for 127.0.0.1, made once per $RUN.
ensure_workload_webhook_cert() {
  local d=$WORKLOAD_WEBHOOK_CERTS
  [ -s "$d/tls.crt" ] && [ -s "$d/tls.key" ] && [ -s "$d/ca.crt" ] && return 0
  mkdir -p "$d" && chmod 700 "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=kubeslurm local webhook CA" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$d/tls.key" -out "$d/tls.csr" 2>/dev/null
  openssl x509 -req -in "$d/tls.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 \
    -extfile <(printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n') -out "$d/tls.crt" 2>/dev/null
  rm -f "$d/tls.csr"
}

# The controller's Configuration (jobset's and lws's config APIs share these fields): no
# leader election, no cert rotation, metrics off, webhook and probes on fixed local ports.
render_workload_controller_config() {
  local group=jobset.x-k8s.io
  [ "$1" = lws-controller ] && group=lws.x-k8s.io
  write_if_changed "$RUN/$1.yaml" 0644 <<EOF
apiVersion: config.$group/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: 127.0.0.1:$(workload_controller_port "$1" health)
webhook:
  host: 127.0.0.1
  port: $(workload_controller_port "$1" webhook)
  certDir: $WORKLOAD_WEBHOOK_CERTS
EOF
}

# The directory of a workload controller's module (pinned by hack/tools/<name>), for its CRDs.
workload_module_dir() {
  (cd "$REPO/hack/tools/$1" && go list -m -f '{{.Dir}}' "sigs.k8s.io/$1")
}

# comp_prepare NAME: what NAME needs on disk before it starts (idempotent, never wipes state).
comp_prepare() {
  case $1 in
    etcd) mkdir -p "$RUN/etcd" && chmod 700 "$RUN/etcd" ;;
    apiserver) ensure_k8s_secrets ;;
    controller-manager | kwok)
      [ -s "$RUN/admin.kubeconfig" ] || die "$1 needs $RUN/admin.kubeconfig (run deploy/local/up.sh)" ;;
    jobset-controller | lws-controller)
      [ -x "$BIN/$1" ] || die "no $BIN/$1 (make tools)"
      [ -s "$RUN/admin.kubeconfig" ] || die "$1 needs $RUN/admin.kubeconfig (run deploy/local/up.sh)"
      ensure_workload_webhook_cert
      render_workload_controller_config "$1" ;;
    slurmctld) [ -s "$SLURM_ROOT/etc/slurm/slurm.conf" ] || slurm_write_config ;;
    slurmrestd)
      [ -s "$SLURM_ROOT/etc/slurm/slurm.conf" ] || die "no slurm.conf yet: start slurmctld first"
      [ -n "$(slurm_ids slurmrestd)" ] || die "no slurmrestd user in the Slurm root: start slurmctld first" ;;
    slurmd-node-*)
      [ -s "$SLURM_ROOT/etc/slurm/slurm.conf" ] || die "no slurm.conf yet: start slurmctld first"
      mkdir -p "$SLURM_ROOT/var/spool/slurmd/node-${1#slurmd-node-}" ;;
    scheduler)
      [ -x "$BIN/kubeslurm-scheduler" ] || die "no $BIN/kubeslurm-scheduler (make build)"
      [ -s "$RUN/scheduler.kubeconfig" ] || die "no $RUN/scheduler.kubeconfig (run deploy/local/up.sh)"
      render_scheduler_config ;;
    controller)
      [ -x "$BIN/kubeslurm-controller" ] || die "no $BIN/kubeslurm-controller (make build)"
      [ -s "$RUN/controller.kubeconfig" ] || die "no $RUN/controller.kubeconfig (run deploy/local/up.sh)"
      [ -s "$JWT_KEY_FILE" ] || die "no $JWT_KEY_FILE (start slurmctld first)" ;;
    podrunner-*)
      [ -x "$BIN/kubeslurm-podrunner" ] || die "no $BIN/kubeslurm-podrunner (make build)"
      [ -s "$RUN/admin.kubeconfig" ] || die "$1 needs $RUN/admin.kubeconfig (run deploy/local/up.sh)"
      [ -d "$RUN/slurm-root/" ] || die "no $RUN/slurm-root (run deploy/local/up.sh)" ;;
  esac
}

# comp_cmd NAME: sets CMD, the component's command line.
comp_cmd() {
  local i
  case $1 in
    etcd)
      # --unsafe-no-fsync: a throw-away dev cluster, wiped on every fresh `up`.
      CMD=("$BIN/etcd" --name=kubeslurm --data-dir="$RUN/etcd"
        --listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379
        --listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380
        --initial-cluster=kubeslurm=http://127.0.0.1:2380 --unsafe-no-fsync --log-level=warn) ;;
    apiserver)
      CMD=("$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379
        --bind-address=127.0.0.1 --secure-port=6443 --cert-dir="$CERTS"
        --authorization-mode=RBAC --token-auth-file="$RUN/tokens.csv"
        --service-account-issuer=https://kubernetes.default.svc.cluster.local
        --service-account-key-file="$CERTS/sa.pub" --service-account-signing-key-file="$CERTS/sa.key"
        --service-cluster-ip-range=10.0.0.0/24
        # This admission plugin taints every new node node.kubernetes.io/not-ready, for the
        # nodelifecycle controller to lift once Ready; that controller is off (see below).
        --disable-admission-plugins=TaintNodesByCondition
        # Kubernetes' own PodGroup API (alpha in 1.36), one of the pod groups kubeslurm reads.
        --feature-gates=GenericWorkload=true --runtime-config=scheduling.k8s.io/v1alpha2=true
        # Close open watches on SIGTERM instead of waiting the request timeout (60 s) for them.
        --shutdown-watch-termination-grace-period=2s) ;;
    controller-manager)
      CMD=("$BIN/kube-controller-manager" --kubeconfig="$RUN/admin.kubeconfig"
        --authentication-kubeconfig="$RUN/admin.kubeconfig" --authorization-kubeconfig="$RUN/admin.kubeconfig"
        --bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false
        "--controllers=*,-nodeipam,-nodelifecycle"
        # Kubernetes' PodGroup API: its podgroup-protection controller lifts the finalizer on delete.
        --feature-gates=GenericWorkload=true
        --service-account-private-key-file="$CERTS/sa.key" --root-ca-file="$CERTS/apiserver.crt"
        --use-service-account-credentials=false) ;;
    kwok)
      CMD=("$BIN/kwok" --kubeconfig="$RUN/admin.kubeconfig" --config="$LOCAL_DIR/kwok-stages.yaml"
        --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake
        --server-address=127.0.0.1:10247 --cidr=10.244.0.0/16) ;;
    jobset-controller | lws-controller)
      CMD=("$BIN/$1" --kubeconfig="$RUN/admin.kubeconfig" --config="$RUN/$1.yaml") ;;
    slurmctld)
      CMD=("$LOCAL_DIR/slurm-exec.sh" --clean /usr/sbin/slurmctld -D) ;;
    slurmrestd)
      CMD=("$LOCAL_DIR/slurm-exec.sh" --clean --user "$(slurm_ids slurmrestd)" --env SLURM_JWT=daemon
        /usr/sbin/slurmrestd -s openapi/slurmctld -a rest_auth/jwt 127.0.0.1:6820) ;;
    slurmd-node-*)
      i=${1#slurmd-node-}
      # --tmpfs /run/slurm: each slurmd gets its own sack.socket there (seen by its job steps);
      # and its own GPUs and DCGM job-mapping directory.
      CMD=("$LOCAL_DIR/slurm-exec.sh" --clean --tmpfs /run/slurm --tmpfs "$DCGM_JOB_MAPPING_DIR"
        --fake-gpus "$GPUS_PER_NODE" /usr/sbin/slurmd -D -Z -N "node-$i"
        --conf "CPUs=4 RealMemory=7900 Gres=gpu:$GPUS_PER_NODE Port=$((6830 + i))") ;;
    scheduler)
      # Delegated authn/authz (TokenReview, SubjectAccessReview) as in-cluster, so /metrics
      # answers a bearer token allowed `get` on the /metrics non-resource URL (docs/metrics.md).
      CMD=("$BIN/kubeslurm-scheduler" --config "$RUN/scheduler-config.yaml"
        --authentication-kubeconfig "$RUN/scheduler.kubeconfig" --authorization-kubeconfig "$RUN/scheduler.kubeconfig"
        --secure-port=10259 --bind-address=127.0.0.1 -v=2) ;;
    controller)
      # A short NotReady grace (default 5m) so the e2e test of a dead node's pod is quick;
      # GPUUnhealthy drains, as a GPU health check's condition would (e2e node test 5).
      # SlurmClusters reconciled (e2e/slurmcluster_test.go).
      CMD=("$BIN/kubeslurm-controller" --kubeconfig "$RUN/controller.kubeconfig"
        --slurmrestd-url "$SLURMRESTD_URL" --slurm-user "$SLURM_USER" --slurm-jwt-key-file "$JWT_KEY_FILE"
        --metrics-bind-address 127.0.0.1:8081 --health-probe-bind-address 127.0.0.1:8082
        --webhook-host 127.0.0.1 --webhook-port 9443 --webhook-cert-hosts 127.0.0.1
        --not-ready-grace-period 20s --drain-on-node-conditions GPUUnhealthy
        --dcgm-job-mapping-configmap "$SLURM_NS/kubeslurm-dcgm-job-mapping" --dcgm-job-mapping-dir "$DCGM_JOB_MAPPING_DIR" --enable-slurmcluster)
      # Slurm's block topology from the nodes' nvidia.com/gpu.clique labels, only while
      # $RUN/controller-topology exists (the e2e topology tests create it): with base block
      # size 4 Slurm runs no job on more than 4 nodes, which other tests need.
      if [ -e "$RUN/controller-topology" ]; then
        CMD+=(--topology-file "$TOPOLOGY_FILE" --topology-block-sizes 4)
      fi ;;
    podrunner-*)
      # The local SlurmCluster's host registers a node of its own and binds the unscheduled
      # pods of our images to it; the others adopt their kwok node (docs/pod-runner.md).
      local node=${1#podrunner-} own=false
      [ "$node" = "$SLURMCLUSTER_HOST" ] && own=true
      CMD=("$BIN/kubeslurm-podrunner" --kubeconfig "$RUN/admin.kubeconfig" --node-name "$node"
        --state-dir "$RUN/podrunner-$node" --slurm-root "$RUN/slurm-root"
        --bind-unscheduled="$own" --adopt-node="$([ "$own" = true ] && echo false || echo true)") ;;
  esac
}

# comp_ready NAME: one readiness probe.
comp_ready() {
  local st t
  case $1 in
    etcd) curl -fsS --max-time 2 http://127.0.0.1:2379/health 2>/dev/null | grep -q '"health":"true"' ;;
    apiserver)
      [ "$(curl -fsSk --max-time 2 -H "Authorization: Bearer $(admin_token)" "$APISERVER_URL/readyz" 2>/dev/null)" = ok ] ;;
    controller-manager) curl -fsSk --max-time 2 https://127.0.0.1:10257/healthz >/dev/null 2>&1 ;;
    kwok) curl -fsS --max-time 2 http://127.0.0.1:10247/healthz >/dev/null 2>&1 ;;
    jobset-controller | lws-controller)
      # Ready once its webhook serves: the API server calls it for every JobSet/LWS and their pods.
      curl -fsS --max-time 2 "http://127.0.0.1:$(workload_controller_port "$1" health)/readyz" >/dev/null 2>&1 &&
        [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$WORKLOAD_WEBHOOK_CERTS/ca.crt" \
          "https://127.0.0.1:$(workload_controller_port "$1" webhook)/" 2>/dev/null)" != 000 ] ;;
    slurmctld) slurm scontrol ping 2>/dev/null | grep -q 'is UP' ;;
    slurmrestd)
      # Any HTTP answer means it listens (the authenticated ping comes later, in up.sh).
      [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$SLURMRESTD_URL/openapi/v3" 2>/dev/null)" != 000 ] ;;
    slurmd-node-*)
      # Registered by this slurmd (start time not older than our launch) and responding.
      st=$(slurm scontrol show node "node-${1#slurmd-node-}" -o 2>/dev/null) || return 1
      t=$(sed -n 's/.* SlurmdStartTime=\([^ ]*\).*/\1/p' <<<"$st")
      [[ $t == [0-9]* ]] || return 1
      [ "$(date -d "$t" +%s)" -ge "${COMP_START_TIME:-0}" ] || return 1
      ! grep -Eq ' State=[^ ]*(DOWN|NOT_RESPONDING|UNKNOWN|FUTURE|\*)' <<<"$st" ;;
    scheduler) curl -fsSk --max-time 2 https://127.0.0.1:10259/healthz >/dev/null 2>&1 ;;
    controller)
      curl -fsS --max-time 2 http://127.0.0.1:8082/readyz >/dev/null 2>&1 ||
        curl -fsS --max-time 2 http://127.0.0.1:8082/healthz >/dev/null 2>&1 ;;
    podrunner-*)
      [ "$(kc get node "${1#podrunner-}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] ;;
  esac
}

comp_timeout() {
  case $1 in
    apiserver | scheduler) echo 120 ;;
    controller-manager | controller) echo 90 ;;
    *) echo 45 ;;
  esac
}

log_tail() { tail -n "${2:-25}" "$(comp_log "$1")" 2>/dev/null | sed 's/^/    | /' >&2 || true; }

# comp_wait_ready NAME: until ready; fails (and stops it) if it dies or times out.
comp_wait_ready() {
  local n=$1 t0 limit pid
  t0=$(date +%s)
  limit=$(comp_timeout "$n")
  while :; do
    if ! pid=$(comp_pid "$n"); then
      warn "$n exited during start-up; end of $(comp_log "$n"):"
      log_tail "$n"
      rm -f "$(pidfile "$n")"
      return 1
    fi
    if comp_ready "$n"; then
      info "$n running (pid $pid, ready after $(($(date +%s) - t0)) s, log $(comp_log "$n"))"
      return 0
    fi
    if [ $(($(date +%s) - t0)) -ge "$limit" ]; then
      warn "$n not ready after $limit s; stopping it. End of $(comp_log "$n"):"
      log_tail "$n"
      comp_stop "$n" >/dev/null
      return 1
    fi
    sleep 0.5
  done
}

# comp_ports NAME: the TCP ports NAME listens on.
comp_ports() {
  case $1 in
    etcd) echo 2379 2380 ;;
    apiserver) echo 6443 ;;
    controller-manager) echo 10257 ;;
    kwok) echo 10247 ;;
    jobset-controller | lws-controller) echo "$(workload_controller_port "$1" webhook) $(workload_controller_port "$1" health)" ;;
    slurmctld) echo 6817 ;;
    slurmrestd) echo 6820 ;;
    slurmd-node-*) echo $((6830 + ${1#slurmd-node-})) ;;
    scheduler) echo 10259 ;;
    controller) echo 8081 8082 9443 ;;
  esac
}

# Fails when a port NAME needs is taken (by something that is not this component).
check_ports_free() {
  local p users
  for p in $(comp_ports "$1"); do
    users=$(ss -Hltnp "sport = :$p" 2>/dev/null) || continue
    [ -z "$users" ] || die "$1 cannot start: 127.0.0.1:$p is in use: $users"
  done
}

# comp_start NAME: starts NAME unless its PID file names a live process; waits until ready.
comp_start() {
  local n=$1 pid log
  valid_component "$n" || die "unknown component '$n'"
  if pid=$(comp_pid "$n"); then
    info "$n already running (pid $pid)"
    return 0
  fi
  rm -f "$(pidfile "$n")"
  check_ports_free "$n"
  comp_prepare "$n"
  comp_cmd "$n"
  mkdir -p "$PIDS" "$LOGS"
  log=$(comp_log "$n")
  { printf '\n===== %s: starting %s\n' "$(date -Is)" "$n"; printf '%q ' "${CMD[@]}"; echo; } >>"$log"
  COMP_START_TIME=$(date +%s)
  # setsid: own session, so a terminal's hang-up or Ctrl-C does not reach it. It does not
  # fork here (we are not a process-group leader), so $! is the component's own PID.
  setsid "${CMD[@]}" >>"$log" 2>&1 </dev/null &
  echo $! >"$(pidfile "$n")"
  comp_wait_ready "$n"
}

pid_gone() {
  local s
  [ -r "/proc/$1/stat" ] || return 0
  s=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 0
  [ -z "$s" ] || [ "$s" = Z ]
}

# comp_stop_signals NAME: the signals comp_stop sends, each after the one before has had
# its time (comp_stop_wait). A pod runner stops its pods first, each within its grace
# period (a worker drains its node), and a second SIGTERM ends them all at once: killed, it
# would leave them running.
comp_stop_signals() {
  case $1 in
    podrunner-*) echo TERM TERM KILL ;;
    *) echo TERM KILL ;;
  esac
}

# comp_stop_wait NAME SIGNAL N: seconds given to NAME after SIGNAL, its Nth (from 1).
comp_stop_wait() {
  case $1:$2:$3 in
    *:KILL:*) echo 5 ;;
    podrunner-*:TERM:1) echo 60 ;;
    *) echo 10 ;;
  esac
}

# comp_stop NAME: comp_stop_signals until it is gone; removes the PID file. Stopped already
# is fine.
comp_stop() {
  local n=$1 pid i f sig prev k=0 waited=
  f=$(pidfile "$n")
  if ! pid=$(comp_pid "$n"); then
    rm -f "$f"
    info "$n not running"
    return 0
  fi
  for sig in $(comp_stop_signals "$n"); do
    pid_gone "$pid" && break
    [ -n "$waited" ] && warn "$n (pid $pid) still alive $waited s after SIG$prev: SIG$sig"
    kill "-$sig" "$pid" 2>/dev/null || true
    k=$((k + 1)) prev=$sig waited=$(comp_stop_wait "$n" "$sig" "$k")
    for ((i = 0; i < waited * 10; i++)); do pid_gone "$pid" && break; sleep 0.1; done
  done
  rm -f "$f"
  printf '\n===== %s: stopped %s (pid %s)\n' "$(date -Is)" "$n" "$pid" >>"$(comp_log "$n")"
  info "$n stopped (pid $pid)"
}

# comp_status NAME: one line; returns 0 when running.
comp_status() {
  local pid
  if pid=$(comp_pid "$1"); then
    printf '%-26s running  pid %s\n' "$1" "$pid"
  else
    printf '%-26s stopped\n' "$1"
    return 1
  fi
}

# Processes whose root directory is the Slurm root (job steps outliving their slurmd, ...).
slurm_root_pids() {
  local p r R
  R=$(readlink -f "$SLURM_ROOT")
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null) || continue
    [ "$r" = "$R" ] && echo "${p#/proc/}"
  done
  return 0
}

# Host mounts under the Slurm root (there should never be any).
slurm_root_mounts() {
  local R
  R=$(readlink -f "$SLURM_ROOT")
  awk -v r="$R" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts
}

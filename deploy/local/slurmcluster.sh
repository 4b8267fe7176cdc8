#!/usr/bin/env bash
# slurmcluster.sh up|down|slurm COMMAND [ARGS...] — a Slurm cluster that kubeslurm's
# controller runs from a SlurmCluster, on the running local cluster (`make up` first), with a
# kubeslurm release of its own placing pods through it (docs/slurm-cluster.md, "Trying it on
# the local cluster").
#   up     kwok nodes slurm-worker-1 and -2, a pod runner adopting each (their slurmd pods
#          run for real) and one on a node of its own, slurm-host (slurmctld, slurmrestd, the
#          release's scheduler and controller); the SlurmCluster of
#          examples/slurmcluster-kwok.yaml in the namespace slurmcluster-demo; the release
#          (helm, examples/kubeslurm-for-slurmcluster.values.yaml); and the example pod
#          placed through that Slurm. Idempotent.
#   down   removes all of it (the release, the namespace, the runners, the nodes).
#   slurm  runs one of Slurm's commands against the SlurmCluster's Slurm, in a pod of its
#          slurmctld image with its /etc/slurm, and prints what it printed (the way the e2e
#          tests do: the pod runner has no `kubectl exec`).
# The runners are components of the local cluster (component.sh podrunner-<node>), so
# `make down` stops them too.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

NS=slurmcluster-demo
CLUSTER=slurm
RELEASE=slurm-kubeslurm
SCHEDULER_NAME=kubeslurm-slurm
EXAMPLE=$REPO/examples/slurmcluster-kwok.yaml
RUNNERS=("$SLURMCLUSTER_HOST" "${SLURMCLUSTER_WORKERS[@]}")

# The chart's ports moved clear of the local components' and of the e2e tests' release.
RELEASE_SETS=(scheduler.replicas=1 scheduler.securePort=10289 controller.metricsPort=18094 controller.healthPort=18095
  "controller.extraArgs={--not-ready-grace-period=20s}")

helm_local() {
  HELM_CACHE_HOME=$RUN/helm/cache HELM_CONFIG_HOME=$RUN/helm/config HELM_DATA_HOME=$RUN/helm/data \
    "$BIN/helm" --kubeconfig "$RUN/admin.kubeconfig" "$@"
}

# example_port SECTION: the port of the SlurmCluster's spec.SECTION.
example_port() { kc get -f "$EXAMPLE" -n "$NS" -o jsonpath="{.spec.$1.port}"; }

# cluster_token: a JWT for the slurm user signed with the cluster's JWT key, valid 10
# minutes (`kubeslurm-controller slurm-token`).
cluster_token() {
  local key
  key=$(kc get secret -n "$NS" "$CLUSTER-jwt-key" -o jsonpath='{.data.jwt_hs256\.key}') && [ -n "$key" ] ||
    die "no JWT key in Secret $NS/$CLUSTER-jwt-key"
  base64 -d <<<"$key" | "$BIN/kubeslurm-controller" slurm-token --key-file - --user "$SLURM_USER" --lifetime 10m
}

# slurm_in_cluster COMMAND [ARGS...]: see the header. Fails with the command. The pod has
# the volume and security context of slurmctld's own pod (the configuration it runs, as the
# slurm user) and authenticates with auth/jwt: Slurm's commands make auth/slurm credentials
# only through a local sackd or slurmd.
slurm_in_cluster() {
  local name=slurm-cmd-$$-$RANDOM phase= sts log i a args token
  token=$(cluster_token) || die "no token for $NS/$CLUSTER's Slurm"
  sts=$(kc get statefulset -n "$NS" "$CLUSTER-controller" -o json) || die "no slurmctld StatefulSet in $NS"
  # Each argument through --arg, taken as it is (jq would read an argument like -h as its own).
  args=$(for a in "/usr/bin/$1" "${@:2}"; do jq -n --arg v "$a" '$v'; done | jq -sc .)
  jq --arg ns "$NS" --arg name "$name" --arg token "$token" --argjson args "$args" '
    .spec.template.spec as $s | ($s.volumes[] | select(.name == "config")) as $config |
    {apiVersion: "v1", kind: "Pod", metadata: {namespace: $ns, name: $name},
     spec: {restartPolicy: "Never", securityContext: $s.securityContext, volumes: [$config],
       containers: [{name: "cmd", image: $s.containers[0].image, command: $args,
         workingDir: "/tmp", env: [{name: "SLURM_JWT", value: $token}],
         volumeMounts: [{name: "config", mountPath: "/etc/slurm", readOnly: true}]}]}}' <<<"$sts" |
    kc create -f - >/dev/null
  for ((i = 0; i < 120; i++)); do
    phase=$(kc get pod -n "$NS" "$name" -o jsonpath='{.status.phase}')
    [ "$phase" = Succeeded ] || [ "$phase" = Failed ] && break
    sleep 0.5
  done
  log=$RUN/podrunner-$SLURMCLUSTER_HOST/logs/${NS}_${name}_cmd.log
  grep -v -e '^===== ' -e '^$' "$log" 2>/dev/null || true
  kc delete pod -n "$NS" "$name" --wait=false >/dev/null
  [ "$phase" = Succeeded ] || { warn "$* in $NS/$name: ${phase:-not run}"; return 1; }
}

# wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds.
wait_for() {
  local what=$1 limit=$2 t0
  shift 2
  t0=$(date +%s)
  until "$@" >/dev/null 2>&1; do
    [ $(($(date +%s) - t0)) -lt "$limit" ] || die "$what: not after $limit s"
    sleep 1
  done
  info "$what (after $(($(date +%s) - t0)) s)"
}

# drop_claims: the namespace's PersistentVolumeClaims as the runners keep them (directories
# that outlive their pods, docs/pod-runner.md); they go with the namespace.
drop_claims() {
  local n
  for n in "${RUNNERS[@]}"; do rm -rf "${RUN:?}/podrunner-$n/claims/$NS"; done
}

cluster_ready() {
  [ "$(kc get slurmcluster -n "$NS" "$CLUSTER" -o jsonpath='{.status.conditions[?(@.type=="ControllerReady")].status}/{.status.readyWorkers}')" = "True/${#SLURMCLUSTER_WORKERS[@]}" ]
}
# workers_serving: sinfo lists every worker responding and not drained (idle, or running
# jobs: a second `up` finds the example's).
workers_serving() {
  local out n
  out=$(slurm_in_cluster sinfo -h -N -o '%N %t') || return 1
  for n in "${SLURMCLUSTER_WORKERS[@]}"; do grep -Eqx "$n (idle|mix|alloc)" <<<"$out" || return 1; done
}

up() {
  [ "$(id -u)" = 0 ] || die "slurmcluster.sh needs root (the pod runners make mount namespaces)"
  alive apiserver && alive controller || die "the local cluster is not running: make up first"
  [ -x "$BIN/helm" ] || die "no $BIN/helm (make tools)"
  command -v jq >/dev/null || die "missing command: jq (Debian package jq)"
  t0=$(date +%s)
  step "kwok nodes ${SLURMCLUSTER_WORKERS[*]}"
  # No kubeslurm.io/slurm-node label: the local Slurm has no node of these names.
  for n in "${SLURMCLUSTER_WORKERS[@]}"; do kwok_node_manifest "$n"; done | kc apply -f - | sed 's/^/    /'
  step "pod runners: $SLURMCLUSTER_HOST (its own node), and one adopting each kwok node"
  for n in "${RUNNERS[@]}"; do comp_start "podrunner-$n"; done
  step "SlurmCluster $NS/$CLUSTER ($(basename "$EXAMPLE"))"
  # No namespace, no claims: what a runner keeps of them (slurmctld's state) is stale.
  kc get namespace "$NS" >/dev/null 2>&1 || drop_claims
  kc create namespace "$NS" --dry-run=client -o yaml | kc apply -f - | sed 's/^/    /'
  kc apply -n "$NS" -f "$EXAMPLE" | sed 's/^/    /'
  wait_for "slurmctld ready, ${#SLURMCLUSTER_WORKERS[@]} workers ready" 300 cluster_ready
  wait_for "sinfo lists ${SLURMCLUSTER_WORKERS[*]} up" 120 workers_serving
  step "kubeslurm release $RELEASE for that Slurm (schedulerName $SCHEDULER_NAME)"
  local sets=() v
  for v in "slurm.restdURL=http://127.0.0.1:$(example_port restApi)" "${RELEASE_SETS[@]}"; do sets+=(--set "$v"); done
  helm_local upgrade --install "$RELEASE" "$REPO/charts/kubeslurm" -n "$NS" --wait --timeout 3m \
    -f "$REPO/examples/kubeslurm-for-slurmcluster.values.yaml" "${sets[@]}" | sed 's/^/    /'
  step "example: examples/pod.yaml with schedulerName $SCHEDULER_NAME"
  local pod
  pod=$(sed "s/^\(  schedulerName:\).*/\1 $SCHEDULER_NAME/" "$REPO/examples/pod.yaml")
  grep -q "^  schedulerName: $SCHEDULER_NAME\$" <<<"$pod" || die "examples/pod.yaml has no schedulerName line to change"
  kc apply -n "$NS" -f - <<<"$pod" | sed 's/^/    /'
  if kc wait -n "$NS" --for=jsonpath='{.status.phase}'=Running -f "$REPO/examples/pod.yaml" --timeout=120s >/dev/null; then
    kc get -n "$NS" -f "$REPO/examples/pod.yaml" -o wide | sed 's/^/    /'
    slurm_in_cluster squeue | sed 's/^/    /'
  else
    warn "the example pod is not Running after 120 s:"
    kc describe -n "$NS" -f "$REPO/examples/pod.yaml" >&2 || true
    exit 1
  fi
  kc get slurmcluster -n "$NS" | sed 's/^/    /'
  step "up in $(($(date +%s) - t0)) s. Then:"
  local hint cmd why
  while IFS='|' read -r cmd why; do printf -v hint '%-58s # %s' "$cmd" "$why"; info "$hint"; done <<EOF
kubectl -n $NS describe pod slurm-placed|its job in that Slurm, from the release's controller
kubectl -n $NS describe slurmcluster $CLUSTER|conditions, workers, node states, events
deploy/local/slurmcluster.sh slurm sinfo|any Slurm command, against that Slurm
make down-slurmcluster|removes it (make down does too)
EOF
}

down() {
  step "removing the local SlurmCluster (namespace $NS) and its nodes"
  if alive apiserver; then
    if helm_local status "$RELEASE" -n "$NS" >/dev/null 2>&1; then
      helm_local uninstall "$RELEASE" -n "$NS" --wait --timeout 2m | sed 's/^/    /'
    fi
    # Deleting the namespace ends the pods' jobs, then the SlurmCluster (its workers stop at
    # once, busy or not) while the runners still run them.
    kc delete namespace "$NS" --ignore-not-found --timeout=180s | sed 's/^/    /'
  fi
  local n
  for n in "${RUNNERS[@]}"; do comp_stop "podrunner-$n"; done
  drop_claims
  if alive apiserver; then
    for n in "${SLURMCLUSTER_WORKERS[@]}"; do kc delete node "$n" --ignore-not-found | sed 's/^/    /'; done
  fi
}

case ${1:-} in
  up) up ;;
  down) down ;;
  slurm) [ $# -ge 2 ] || die "usage: $0 slurm COMMAND [ARGS...]"; shift; slurm_in_cluster "$@" ;;
  *) echo "usage: $0 up|down|slurm COMMAND [ARGS...]" >&2; exit 2 ;;
esac

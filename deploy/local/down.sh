#!/usr/bin/env bash
# down.sh — stops what up.sh started, by PID file, in reverse start order (SIGTERM, 10 s,
# SIGKILL). Idempotent. Then makes sure nothing is left: no process of a PID file, no process
# still inside the Slurm root (e.g. a job step), no mount under the Slurm root.
# Keeps .local/ (logs, certs, keys); the next `up` starts Kubernetes and Slurm from empty state.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

step "stopping the local cluster ($RUN)"
# The local SlurmCluster's pods first, while the API server runs (slurmcluster.sh).
if alive apiserver && compgen -G "$PIDS/podrunner-*.pid" >/dev/null; then
  "$LOCAL_DIR/slurmcluster.sh" down || warn "slurmcluster.sh down failed; its runners are stopped below"
fi
mapfile -t order < <(all_components)
# Anything else with a PID file too (e.g. slurmd of a larger NODES), before the rest.
for f in "$PIDS"/*.pid; do
  [ -e "$f" ] || continue
  n=$(basename "$f" .pid)
  if ! printf '%s\n' "${order[@]}" | grep -qxF "$n"; then
    if valid_component "$n"; then order=("$n" "${order[@]}"); else warn "ignoring unknown PID file $f"; fi
  fi
done
started=()
for ((i = ${#order[@]} - 1; i >= 0; i--)); do
  n=${order[i]}
  if pid=$(comp_pid "$n"); then started+=("$pid"); comp_stop "$n"; else rm -f "$(pidfile "$n")"; fi
done
[ ${#started[@]} -gt 0 ] || info "nothing was running"

left=()
for pid in ${started[@]+"${started[@]}"}; do pid_gone "$pid" || left+=("$pid"); done
[ ${#left[@]} -eq 0 ] || die "still alive after stop: ${left[*]}"

# Job steps (slurmstepd and their tasks) can outlive their slurmd; they run in the root.
mapfile -t strays < <(slurm_root_pids)
if [ ${#strays[@]} -gt 0 ]; then
  step "processes left inside the Slurm root: ${strays[*]}"
  ps -o pid,user,args -p "$(IFS=,; echo "${strays[*]}")" | sed 's/^/    /' || true
  kill -TERM "${strays[@]}" 2>/dev/null || true
  for ((i = 0; i < 20; i++)); do
    mapfile -t strays < <(slurm_root_pids)
    [ ${#strays[@]} -eq 0 ] && break
    sleep 0.1
  done
  [ ${#strays[@]} -eq 0 ] || kill -KILL "${strays[@]}" 2>/dev/null || true
  sleep 0.5
  mapfile -t strays < <(slurm_root_pids)
  [ ${#strays[@]} -eq 0 ] || die "processes still inside the Slurm root: ${strays[*]}"
fi

# There should never be host mounts under the Slurm root (slurm-exec.sh mounts only inside
# private namespaces); unmount any anyway, deepest first.
mapfile -t mnts < <(slurm_root_mounts | sort -r)
if [ ${#mnts[@]} -gt 0 ]; then
  warn "mounts under the Slurm root on the host (unexpected): ${mnts[*]}"
  for m in "${mnts[@]}"; do umount -l "$m" || warn "could not unmount $m"; done
  [ -z "$(slurm_root_mounts)" ] || die "mounts remain under $SLURM_ROOT"
fi
# The controller's topology.yaml is derived state, like Slurm's (see lib.sh).
rm -f "$TOPOLOGY_FILE"
step "down: no component process, no process in the Slurm root, no mount under it"

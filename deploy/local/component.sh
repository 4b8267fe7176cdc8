#!/usr/bin/env bash
# component.sh start|stop|restart|status NAME
#   NAME: etcd apiserver controller-manager kwok slurmctld slurmrestd slurmd-node-<i> scheduler controller
#         podrunner-<node> (the local SlurmCluster's pod runners, slurmcluster.sh)
# Starts one component of the local cluster in the background (PID file in .local/pids, log
# in .local/logs) and waits until it is ready, or stops it (SIGTERM, 10 s, SIGKILL). Used by
# up.sh/down.sh and by the end-to-end tests (e.g. `component.sh restart scheduler`).
# start never wipes state; only up.sh does, on a fresh start of the whole cluster.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() { echo "usage: $0 start|stop|restart|status NAME" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1 name=$2
valid_component "$name" || { echo "unknown component '$name'" >&2; usage; }
case $action in
  start) comp_start "$name" ;;
  stop) comp_stop "$name" ;;
  restart) comp_stop "$name"; comp_start "$name" ;;
  status) comp_status "$name" || exit 3 ;;
  *) usage ;;
esac

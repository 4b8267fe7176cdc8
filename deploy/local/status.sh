#!/usr/bin/env bash
# status.sh — one line per component of the local cluster: running (with PID) or stopped.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
while read -r n; do comp_status "$n" || true; done < <(all_components)
m=$(slurm_root_mounts | wc -l)
[ "$m" = 0 ] || echo "WARNING: $m host mounts under $SLURM_ROOT (down.sh removes them)"

#!/bin/sh
# DCGM exporter hpcJobMapping, epilog half (kubeslurm pkg/dcgmjobmap): takes the job's id out
# of the file of each GPU index it held on this node (see prolog.sh) and removes a file no
# job is left in. It never fails: an epilog's failure drains the node.
DIR=${DCGM_JOB_MAPPING_DIR:-/var/lib/dcgm-exporter/job-mapping}
job=${SLURM_JOB_ID:-}
gpus=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}
[ -n "$job" ] && [ -n "$gpus" ] && [ -d "$DIR" ] || exit 0
log() { echo "dcgm-job-mapping epilog, job $job: $*" >&2; }
exec 9>"$DIR/.lock" && flock 9 || log "no lock on $DIR/.lock; going on without"
for i in $(echo "$gpus" | tr ',' ' '); do
  case $i in
    '' | *[!0-9]*) continue ;;
  esac
  f=$DIR/$i
  [ -f "$f" ] || continue
  if grep -vx "$job" "$f" >"$f.new"; then
    mv -f "$f.new" "$f" || log "cannot write $f"
  else
    rm -f "$f" "$f.new" || log "cannot remove $f"
  fi
done
exit 0

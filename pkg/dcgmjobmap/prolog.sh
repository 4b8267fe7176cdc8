#!/bin/sh
# DCGM exporter hpcJobMapping, prolog half (kubeslurm pkg/dcgmjobmap). Slurm runs it as root
# on every node of a job's allocation (PrologFlags=Alloc, so also for kubeslurm's placeholder
# jobs, which have no steps). For each GPU index the job holds on this node, the file named by
# that index in the mapping directory gets the job id as a line of its own: the format
# dcgm-exporter's --hpc-job-mapping-dir reads (one file per GPU, one job id a line).
# It never fails the job: a prolog's failure drains the node, too much for a metrics label.
DIR=${DCGM_JOB_MAPPING_DIR:-/var/lib/dcgm-exporter/job-mapping}
job=${SLURM_JOB_ID:-}
# SLURM_JOB_GPUS: the node's own GPU indices (CUDA_VISIBLE_DEVICES is the same list here).
gpus=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}
[ -n "$job" ] && [ -n "$gpus" ] || exit 0
log() { echo "dcgm-job-mapping prolog, job $job: $*" >&2; }
mkdir -p "$DIR" || { log "cannot create $DIR"; exit 0; }
# One writer at a time (jobs sharing a GPU start together). dcgm-exporter reads only the
# files named by a number: .lock and <i>.new are not taken for GPUs.
exec 9>"$DIR/.lock" && flock 9 || log "no lock on $DIR.lock; going on without"
for i in $(echo "$gpus" | tr ',' ' '); do
  case $i in
    '' | *[!0-9]*) log "skipping GPU '$i' of '$gpus': not an index"; continue ;;
  esac
  f=$DIR/$i
  { [ -f "$f" ] && grep -vx "$job" "$f"; echo "$job"; } >"$f.new" && mv -f "$f.new" "$f" ||
    log "cannot write $f"
done
exit 0

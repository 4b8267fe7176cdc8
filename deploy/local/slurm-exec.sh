#!/usr/bin/env bash
# slurm-exec.sh [--clean] [--user UID:GID] [--env NAME=VALUE]... [--cwd DIR] CMD [ARG...]
#
# Runs CMD inside the Slurm root filesystem (see slurm-root.sh) with chroot, after binding
# /proc, /dev and /sys into it. The binds are made in a private mount namespace of this
# process alone (unshare --mount), so the host never sees them and they vanish with the
# namespace's last process: nothing is ever left mounted, whatever happens to CMD.
# No fork anywhere (unshare without --fork, then exec, exec, ...): the PID of this script is
# the PID of CMD, which is what PID files and `kill` need.
#
#   --clean      do not pass the caller's SLURM_*/SBATCH_*/S*_ variables (daemons)
#   --user U:G   run as numeric uid:gid (chroot --userspec)
#   --env N=V    set a variable for CMD (repeatable)
#   --cwd DIR    working directory inside the root (default /tmp)
#   --tmpfs DIR  an empty tmpfs of its own at DIR inside the root (repeatable)
#   --fake-gpus N  N fake GPU devices of its own, /run/kubeslurm-gpus/nvidia<i> (character
#                devices with NVIDIA's major number 195, never opened), and a gres.conf naming
#                them (Name=gpu File=...), bound over /etc/slurm/gres.conf for CMD alone
set -euo pipefail
self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
if [ "${KUBESLURM_IN_MOUNT_NS:-}" != "$$" ]; then
  # exec keeps our PID, so the marker tells the re-executed script it is inside.
  export KUBESLURM_IN_MOUNT_NS=$$
  exec unshare --mount --propagation private -- "$self" "$@"
fi
unset KUBESLURM_IN_MOUNT_NS
. "$(dirname "$self")/lib.sh"

clean=0 user='' cwd=/tmp gpus=0
extra=() tmpfs=()
while [ $# -gt 0 ]; do
  case $1 in
    --clean) clean=1; shift ;;
    --user) user=$2; shift 2 ;;
    --env) extra+=("$2"); shift 2 ;;
    --cwd) cwd=$2; shift 2 ;;
    --tmpfs) tmpfs+=("$2"); shift 2 ;;
    --fake-gpus) gpus=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--clean] [--user U:G] [--env N=V]... [--cwd DIR] CMD [ARG...]" >&2; exit 2; }
R=$SLURM_ROOT
[ -x "$R/usr/sbin/slurmrestd" ] || { echo "no Slurm root at $R (run deploy/local/slurm-root.sh)" >&2; exit 1; }

mount --rbind /proc "$R/proc"
mount --rbind /dev "$R/dev"
mount --rbind /sys "$R/sys"
for d in ${tmpfs[@]+"${tmpfs[@]}"}; do mkdir -p "$R$d" && mount -t tmpfs -o mode=0755 tmpfs "$R$d"; done
if [ "$gpus" != 0 ]; then
  [[ $gpus =~ ^[1-9][0-9]?$ ]] || { echo "--fake-gpus wants 1..99, not '$gpus'" >&2; exit 2; }
  # File-backed GRES, so that Slurm allocates (and reports) specific GPU indices. The shared
  # root's /etc/slurm/gres.conf stays empty (lib.sh); each slurmd sees its own over it.
  g=$R/run/kubeslurm-gpus
  mkdir -p "$g" && mount -t tmpfs -o mode=0755 tmpfs "$g"
  for ((i = 0; i < gpus; i++)); do mknod -m 0666 "$g/nvidia$i" c 195 "$i"; done
  # AutoDetect=off: no NVML to ask (it would log "System GPU detection failed").
  printf '# Written by slurm-exec.sh --fake-gpus for this slurmd alone.\nAutoDetect=off\nName=gpu File=/run/kubeslurm-gpus/nvidia[0-%d]\n' \
    $((gpus - 1)) >"$g/gres.conf"
  [ -f "$R/etc/slurm/gres.conf" ] || { echo "no $R/etc/slurm/gres.conf to bind over (lib.sh slurm_write_config)" >&2; exit 1; }
  mount --bind "$g/gres.conf" "$R/etc/slurm/gres.conf"
fi

envs=(PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "TERM=${TERM:-dumb}")
if [ "$clean" = 0 ]; then
  for v in $(compgen -e); do
    case $v in
      SLURM_*|SBATCH_*|SALLOC_*|SRUN_*|SQUEUE_*|SINFO_*|SACCT_*|SCONTROL_*|SCANCEL_*) envs+=("$v=${!v}") ;;
    esac
  done
fi
envs+=(${extra[@]+"${extra[@]}"})
exec chroot ${user:+--userspec="$user" --groups="${user#*:}"} "$R" /usr/bin/env -i "${envs[@]}" \
  /bin/sh -c 'cd "$0" || exit 1; exec "$@"' "$cwd" "$@"

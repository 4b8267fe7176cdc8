#!/usr/bin/env bash
# Makes (once) a Debian root filesystem holding real Slurm packages for the local cluster.
# The host's own Slurm is too old for slurmrestd's v0.0.4x API, so Slurm runs from this root
# with chroot. The root is kept in the machine's cache folder, keyed by suite, so every clone
# on this machine shares it; it is rebuilt only when missing, incomplete, or made with another
# package list (its .complete names the list).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/deploy/local/versions.env"
cache=${KUBESLURM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubeslurm}
dir="$cache/slurm-root-$SLURM_SUITE"
# slurmdbd and mariadb-server: accounting (a SlurmCluster's slurmdbd, and the database the
# e2e tests start); sackd: login pods; sssd-ldap and libnss-sss: login pods' users from a
# directory (sssd), with libpam-sss and openssh-server for their ssh logins; slapd with
# ldap-utils: the directory the e2e tests start (and ldapsearch to look into it). With them
# the root is about 900 MB, made in ~85 s.
packages=slurmctld,slurmd,slurmrestd,slurm-client,slurm-wlm-jwt-plugin,procps,ca-certificates,curl,slurmdbd,sackd,mariadb-server,sssd-ldap,libnss-sss,libpam-sss,openssh-server,slapd,ldap-utils
# After the packages: pam_mkhomedir in the PAM session stack (pam-auth-update, as
# deploy/images/Dockerfile.login does), so a login pod's sshd makes a user's home at the
# first login.
setup="DEBIAN_FRONTEND=noninteractive pam-auth-update --enable mkhomedir"
stamp="packages=$packages setup=$setup"

if [ -f "$dir/.complete" ] && grep -qxF "$stamp" "$dir/.complete"; then
  echo "==> Slurm root ($SLURM_SUITE) cached at $dir"
  exit 0
fi
# A root in use (a running local cluster chrooted in it) is never replaced under it.
for proc in /proc/[0-9]*; do
  if [ "$(readlink "$proc/root" 2>/dev/null)" = "$dir" ]; then
    echo "the Slurm root $dir must be remade (other packages), but process ${proc#/proc/} runs in it: run make down first" >&2
    exit 1
  fi
done
command -v debootstrap >/dev/null || {
  echo "==> installing debootstrap"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}
# debootstrap mounts /proc and /sys (and may bind /dev) inside the target while it works; a
# failed or interrupted run can leave them mounted, and `rm -rf` must never walk into them.
umount_under() {
  awk -v r="$1" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m" || true; done
}
echo "==> building Slurm root filesystem from Debian $SLURM_SUITE (2-3 min)"
umount_under "$dir.tmp"
rm -rf --one-file-system "$dir.tmp"
mkdir -p "$cache"
debootstrap --variant=minbase --include="$packages" "$SLURM_SUITE" "$dir.tmp" >"$cache/debootstrap-$SLURM_SUITE.log" 2>&1 || {
  umount_under "$dir.tmp"
  echo "debootstrap failed; see $cache/debootstrap-$SLURM_SUITE.log" >&2
  tail -20 "$cache/debootstrap-$SLURM_SUITE.log" >&2
  exit 1
}
umount_under "$dir.tmp"
chroot "$dir.tmp" sh -c "$setup"
umount_under "$dir"
rm -rf --one-file-system "$dir" && mv "$dir.tmp" "$dir"
{ chroot "$dir" sh -c 'slurmctld -V'; echo "$stamp"; } >"$dir/.complete"
echo "==> Slurm root ready: $(head -1 "$dir/.complete")"

package slurmcluster

import (
	v1 "k8s.io/api/core/v1"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
)

// Key rotation without the controller reading a Secret (it may not): the key Secret may
// also hold SlurmJWKSName, Slurm's key set (several HS256 keys by kid, one "use":
// "default" to sign with, the others still accepted). auth/slurm takes slurm.jwks over
// slurm.key when the file exists. Every daemon mounts the optional key, so editing the
// Secret in place reaches the running pods (the kubelet updates the files), and each
// daemon's script (keyWatchShell) sees the change and makes its daemon read the keys again.
// A rotation is then three edits, each waited out: add the new key, make it the default,
// drop the old one (docs/slurm-cluster.md, "Rotating the keys").

// SlurmJWKSName is the key set's data key in the auth/slurm key Secret, and its file.
const SlurmJWKSName = slurmconf.KeySetFile

// slurmKeyProjections mount the auth/slurm key Secret's key as slurm.key and, when the
// Secret has it, its key set as slurm.jwks.
func slurmKeyProjections(c *slurmv1.SlurmCluster) []v1.VolumeProjection {
	name, key := SlurmKeySecret(c)
	ref := v1.LocalObjectReference{Name: name}
	return []v1.VolumeProjection{
		{Secret: &v1.SecretProjection{LocalObjectReference: ref, Items: []v1.KeyToPath{{Key: key, Path: SlurmKeyName}}}},
		{Secret: &v1.SecretProjection{LocalObjectReference: ref, Optional: ptr(true),
			Items: []v1.KeyToPath{{Key: SlurmJWKSName, Path: SlurmJWKSName}}}},
	}
}

// slurmKeyVolume is a volume of the auth/slurm key files alone (slurmd's and sackd's).
func slurmKeyVolume(c *slurmv1.SlurmCluster, name string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		DefaultMode: ptr[int32](0o400), Sources: slurmKeyProjections(c),
	}}}
}

// keyWatchShell defines, for a daemon's script, keysum (a checksum of the key files in
// $KEY_DIR, whichever exist, and of $WATCH_ALSO if set: paths without spaces, globs
// expanded), startDaemon CMD... (runs CMD in
// the background as $pid, with the key files' checksum then in $keys), keysChanged NAME
// RELOAD (whether they changed since, logged), reloadRaced and supervise RELOAD CMD...: it
// runs CMD in the background, passes SIGTERM on, and every 5 s compares the key
// files with those seen just before CMD started (before, so that a change while CMD starts
// is not missed).
// On a change, RELOAD=hup sends CMD SIGHUP: slurmd then re-executes itself in place (same
// PID, running jobs untouched) and reads its keys again. (slurmctld has a script of its
// own, slurmctldscript.go, which uses keysum and keysChanged.)
// RELOAD=restart stops and starts CMD instead (sackd's SIGHUP hands over to a new
// process, which would end the container; slurmdbd reads its keys only at start). It
// ends with CMD's exit code. CMD is told where the key set is (SLURM_SACK_JWKS): a
// configless daemon looks for it beside the configuration it fetched (a re-executed slurmd
// kept verifying with slurm.key alone in the e2e test). Only CMD: with the variables in
// the container's environment, a worker's `scontrol delete` with a JWT failed (auth/slurm
// instead of auth/jwt) in the e2e test.
//
// reloadRaced CODE NAME says whether a daemon that ended with CODE died of a SIGHUP, and
// if so, that it is started again. A daemon re-executing itself takes SIGHUP at its default
// (end the process) until its handler is back; a key change reaches slurmd as our SIGHUP and
// as slurmctld's reconfigure at about the same time, and in the e2e test the second signal
// ended slurmd (code 129) and so its container. Started again in place, it carries on as
// the re-execution would have: its jobs run on in their slurmstepd.
const keyWatchShell = `keysum() { cat "$KEY_DIR/slurm.key" "$KEY_DIR/slurm.jwks" "$KEY_DIR/jwt_hs256.key" $WATCH_ALSO 2>/dev/null | cksum; }
startDaemon() {
  keys=$(keysum)
  SLURM_SACK_JWKS=$KEY_DIR/slurm.jwks "$@" & pid=$!
}
keysChanged() {
  now=$(keysum)
  [ "$now" = "$keys" ] && return 1
  keys=$now
  echo "kubeslurm: the key files in $KEY_DIR${WATCH_ALSO:+ or $WATCH_ALSO} changed: $1 reads them again ($2)" >&2
}
reloadRaced() {
  [ "$1" = 129 ] || return 1
  echo "kubeslurm: $2 ended by a SIGHUP that came while it re-executed itself for another reload: starting it again" >&2
}
supervise() {
  reload=$1; shift
  trap 'kill -TERM "$pid" 2>/dev/null' TERM INT
  while :; do
    startDaemon "$@"
    while kill -0 "$pid" 2>/dev/null; do
      sleep "${KEY_WATCH_SECONDS:-5}" & wait $!
      keysChanged "${1##*/}" "$reload" || continue
      if [ "$reload" = hup ]; then
        kill -HUP "$pid"
      else
        kill -TERM "$pid"; wait "$pid"
        startDaemon "$@"
      fi
    done
    wait "$pid"; code=$?
    reloadRaced "$code" "${1##*/}" || return "$code"
  done
}
`

package slurmcluster

import (
	"fmt"

	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// slurmctld takes a new configuration in place: its container's script (slurmctldShell)
// copies the mounted files into a directory of its own, has slurmctld re-read them
// (SIGHUP, as `scontrol reconfigure` does) and tells the controller the outcome on the pod's
// annotations. slurmctld runs daemonized, not with -D: then a configuration it refuses
// leaves it running on the one before ("Resuming operation, reconfigure failed."), where a
// foreground slurmctld exits (docs/slurm-cluster.md, "Configuration changes").

// ConfigHashFile is the rendered ConfigMap's file holding its hash (status.configHash):
// slurmctld's script reports which configuration it runs by it.
const ConfigHashFile = "kubeslurm-config-hash"

// slurmctldPaths are where slurmctld's script finds its files.
type slurmctldPaths struct {
	// Conf holds the rendered files and the keys; Applied the files slurmctld last ran
	// (the kept ConfigMap, maybe absent), to start from when Conf's are refused.
	Conf, Applied string
	// Run holds slurmctld's PID file, its log and the configuration it runs (Run/conf).
	Run string
	// Daemon is slurmctld; ServiceAccount the pod's token and CA.
	Daemon, ServiceAccount string
}

// appliedConfigDir is where slurmctld's pod mounts the kept ConfigMap.
const appliedConfigDir = "/etc/slurm-applied"

var podSlurmctldPaths = slurmctldPaths{
	Conf: slurmconf.ConfigDir, Applied: appliedConfigDir, Run: "/run/slurmctld",
	Daemon: "/usr/sbin/slurmctld", ServiceAccount: "/var/run/secrets/kubernetes.io/serviceaccount",
}

// slurmctldScript is slurmctld's container script for paths p.
func slurmctldScript(p slurmctldPaths) string {
	return fmt.Sprintf("CONF=%s\nAPPLIED=%s\nRUN=%s\nDAEMON=%s\nSA=%s\nKEY_DIR=%s\nHASH_FILE=%s\n"+
		"A_RUNNING=%s\nA_REFUSED=%s\nA_REASON=%s\n",
		p.Conf, p.Applied, p.Run, p.Daemon, p.ServiceAccount, p.Conf, ConfigHashFile,
		wellknown.SlurmctldConfigAnnotation, wellknown.SlurmctldRefusedConfigAnnotation, wellknown.SlurmctldRefusedReasonAnnotation) +
		keyWatchShell + slurmctldShell
}

// slurmctldShell runs slurmctld on the configuration in $CONF, from a copy in $RUN/conf:
//
//   - start: slurmctld daemonizes (its foreground process exits 0 even when the
//     configuration is fatal), so the start is judged by its log (`Running as primary
//     controller`, or `fatal:`) and its PID file, then by its answer to `scontrol ping`:
//     after that line it runs SlurmctldPrimaryOnProg and answers nothing until the
//     program ends, so one that has not answered after $RECONFIGURE_TIMEOUT_SECONDS is
//     stopped with what it started. A start that fails otherwise is tried once more
//     5 s later (a passing cause: its host name not yet in DNS); failing again, or hung,
//     the configuration is refused, and slurmctld starts on $APPLIED's if that is another
//     one. Otherwise (nothing kept: a cluster's first configuration) the script reports
//     the refusal and starts again as soon as $CONF's files change, or $RESTART_SECONDS
//     (60) later for a passing cause: no kubelet back-off between a fixed spec and
//     slurmctld.
//   - a start on another configuration than $APPLIED's (the last one slurmctld ran, so the
//     one its configless workers were last sent) is followed by a SIGHUP: slurmctld's
//     reconfigure sends the workers the new one, which its start does not.
//   - a change of $CONF's files (the same twice, 2 s apart: the kubelet writes them at once,
//     the local pod runner one by one) is copied into $RUN/conf, and slurmctld is sent
//     SIGHUP: a new slurmctld process in the PID file with `Running as primary controller`
//     logged runs it; `reconfigure failed` logged means it refused it and runs on as it
//     was, and the files before go back into $RUN/conf (a later SIGHUP, a key change's,
//     must not read the refused ones).
//   - a reconfigure that has not ended after $RECONFIGURE_TIMEOUT_SECONDS (120) is stopped:
//     the new process (the running one's child; the running one waits for it and answers
//     no request meanwhile) is killed with what it started, the running one goes on as it
//     was ("reconfigure failed"), and the configuration is refused as above.
//   - a change of the keys sends SIGHUP too (keyWatchShell): slurmctld reads them again.
//   - the outcome goes onto the pod's annotations ($A_RUNNING: the hash slurmctld runs;
//     $A_REFUSED, $A_REASON: the last hash it refused and its error and fatal lines), with
//     curl and the pod's service account token; retried every pass until it is taken.
//   - SIGTERM is passed on; the script ends once slurmctld has (0), or when slurmctld
//     ended by itself (1). The log, in $RUN, is followed onto stderr and emptied past
//     64 MiB.
const slurmctldShell = `WORK=$RUN/conf LOG=$RUN/slurmctld.log PIDFILE=$RUN/slurmctld.pid
POLL=${CONFIG_POLL_SECONDS:-2} TIMEOUT=${RECONFIGURE_TIMEOUT_SECONDS:-120}
say() { echo "kubeslurm: $*" >&2; }
conffiles() {
  for f in "$1"/*; do
    [ -f "$f" ] || continue
    case ${f##*/} in slurm.key | slurm.jwks | jwt_hs256.key) ;; *) echo "$f" ;; esac
  done
}
confsum() { for f in $(conffiles "$1"); do echo "${f##*/}"; cat "$f"; done | cksum; }
hashOf() { cat "$1/$HASH_FILE" 2>/dev/null || echo unknown; }
copyConf() {
  rm -rf "$2"; mkdir -p "$2"
  for f in $(conffiles "$1"); do cp "$f" "$2/"; done
}
# linkKeys links $CONF's key files into $1: Slurm reads them beside the slurm.conf it runs.
linkKeys() { for k in slurm.key slurm.jwks jwt_hs256.key; do [ -e "$CONF/$k" ] && ln -s "$CONF/$k" "$1/$k"; done; }
install() {
  copyConf "$1" "$WORK.new"; linkKeys "$WORK.new"
  rm -rf "$WORK"; mv "$WORK.new" "$WORK"
}
since() { tail -c +"$mark" "$LOG"; }
failure() { since | grep -E 'error:|fatal:' | tail -n 5; }
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
# ours: the slurmctld processes of this container (its mount namespace), for the log. A
# reconfigure re-executes slurmctld through /proc/self/exe, so its name is then the
# binary's own (Debian's slurmctld-wlm), not the name it was started by.
ours() {
  me=$(readlink /proc/self/ns/mnt)
  for p in /proc/[0-9]*; do
    case $(cat "$p/comm" 2>/dev/null) in "${DAEMON##*/}"*) ;; *) continue ;; esac
    [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$me" ] && printf '%s ' "${p#/proc/}"
  done
}
lastLine() { since | tail -n 1 | sed 's/^\[[^]]*\] *//'; }
# launch starts slurmctld on $WORK's files: 0 when it answers, 1 when it failed to start,
# 2 when it hung (answers).
launch() {
  rm -f "$PIDFILE"; mark=$(($(wc -c <"$LOG") + 1)); keys=$(keysum) hung=
  SLURM_SACK_JWKS=$CONF/slurm.jwks "$DAEMON" -f "$WORK/slurm.conf" -L "$LOG" || return 1
  i=0
  while :; do
    since | grep -q 'Running as primary controller' && { answers; return; }
    since | grep -q 'fatal:' && return 1
    pid=$(cat "$PIDFILE" 2>/dev/null)
    if [ -n "$pid" ]; then alive "$pid" || return 1; elif [ $i -ge 60 ]; then return 1; fi
    i=$((i + 1)); sleep 0.5
  done
}
# parentOf P: the parent process of P.
parentOf() { s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; set -- $s; echo "$2"; }
# below P...: the processes under P... (their children, theirs, and so on).
below() {
  todo=" $* " found=
  while [ "$todo" != " " ]; do
    next=
    for d in /proc/[0-9]*; do
      case $todo in *" $(parentOf "${d#/proc/}") "*) next="$next ${d#/proc/}" ;; esac
    done
    found="$found$next"; todo="$next "
  done
  echo $found
}
# answers waits until slurmctld, started, answers a ping: after "Running as primary
# controller" it runs SlurmctldPrimaryOnProg, answering no request until that ends. One
# that has not answered after $TIMEOUT s is stopped with what it started (2); hung says
# why. The ping goes to 127.0.0.1, from a copy of slurm.conf naming it as SlurmctldHost's
# address: the Service's DNS name need not resolve yet. Without scontrol in the image, the
# log's line is all there is to judge by.
answers() {
  command -v scontrol >/dev/null || { say "no scontrol here: slurmctld's start is judged by its log alone"; return 0; }
  ping=$RUN/ping; rm -rf "$ping"; mkdir -p "$ping"
  sed 's/^\(SlurmctldHost=[^(]*\)(.*)$/\1(127.0.0.1)/' "$WORK/slurm.conf" >"$ping/slurm.conf"
  linkKeys "$ping"
  t0=$(date +%s)
  until SLURM_CONF=$ping/slurm.conf scontrol ping 2>/dev/null | grep -q ' is UP$'; do
    [ -n "$stopping" ] && return 0
    if [ $(($(date +%s) - t0)) -ge "$TIMEOUT" ]; then
      hung="slurmctld had not answered $TIMEOUT s after its start (its last log line: $(lastLine)): it was stopped"
      pid=$(cat "$PIDFILE" 2>/dev/null)
      [ -n "$pid" ] && kill -KILL "$pid" $(below "$pid") 2>/dev/null
      say "$hung"; return 2
    fi
    sleep 1 & wait $!
  done
}
# stopHung stops a reconfigure that has not ended in $RECONFIGURE_TIMEOUT_SECONDS: the
# new slurmctld (a child of the running one, which waits for it and answers nothing
# meanwhile) and what it started are killed; the running one then goes on as it was
# ("reconfigure failed"). hung says why, for the refusal.
stopHung() {
  child=
  for p in $(ours); do [ "$(parentOf "$p")" = "$old" ] && child="$child $p"; done
  hung="the reconfigure had not ended after $TIMEOUT s (its last log line: $(lastLine))"
  if [ -n "$child" ]; then
    hung="$hung: its new slurmctld process was stopped"
    kill -KILL $child $(below $child) 2>/dev/null
  fi
  say "$hung"
}
reconfigure() {
  old=$(cat "$PIDFILE" 2>/dev/null); mark=$(($(wc -c <"$LOG") + 1)); gone=0 waited=0 hung=
  kill -HUP "$old" 2>/dev/null || return 2
  while :; do
    sleep 0.5
    since | grep -q 'reconfigure failed' && return 1
    new=$(cat "$PIDFILE" 2>/dev/null)
    [ "$new" != "$old" ] && alive "$new" && since | grep -q 'Running as primary controller' && return 0
    if alive "$old" || alive "$new"; then gone=0; else gone=$((gone + 1)); fi
    [ $gone -ge 4 ] && { say "no slurmctld after the SIGHUP: neither PID $old nor the PID file's '$new' runs (slurmctld processes here: $(ours))"; return 2; }
    waited=$((waited + 1))
    [ -z "$hung" ] && [ $waited -ge $((2 * TIMEOUT)) ] && stopHung
  done
}
esc() { sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/[[:cntrl:]]/ /g' | awk 'NR > 1 { printf "\\n" } { printf "%s", $0 }'; }
report() {
  host=$KUBERNETES_SERVICE_HOST
  case $host in *:*) host="[$host]" ;; esac
  body=$(printf '{"metadata":{"annotations":{"%s":"%s","%s":"%s","%s":"%s"}}}' "$A_RUNNING" "$running" \
    "$A_REFUSED" "$refused" "$A_REASON" "$(printf '%s' "$reason" | esc)")
  if curl -sS --fail --max-time 10 --cacert "$SA/ca.crt" -H "Authorization: Bearer $(cat "$SA/token")" \
    -H 'Content-Type: application/merge-patch+json' -X PATCH --data-binary "$body" \
    "https://$host:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$POD_NAMESPACE/pods/$POD_NAME" >/dev/null; then
    unreported=
  else
    unreported=1; say "pod $POD_NAMESPACE/$POD_NAME not annotated with slurmctld's configuration; again in ${POLL} s"
  fi
}
refuse() {
  refused=$1 reason=$(failure)
  [ -n "$hung" ] && reason=$(printf '%s\n%s' "$reason" "$hung")
  hung=
  say "slurmctld refused configuration $1: $(echo "$reason" | tail -n 1)"
}
end() {
  report; [ -n "$unreported" ] && { sleep 2; report; }
  sleep 1; kill "$tailpid" 2>/dev/null; exit "$1"
}
stopping= running= refused= reason= unreported= hung=
trap 'stopping=1; kill -TERM "$(cat "$PIDFILE" 2>/dev/null)" 2>/dev/null' TERM INT
mkdir -p "$RUN"; : >"$LOG"
tail -F -n +1 "$LOG" >&2 2>/dev/null & tailpid=$!
# settled waits until $CONF's files read the same twice, $POLL apart (the kubelet writes
# them at once, the local pod runner one by one), and sets now to their sum; false on
# SIGTERM.
settled() {
  now=$(confsum "$CONF")
  while :; do
    sleep "$POLL" & wait $!
    [ -n "$stopping" ] && return 1
    b=$(confsum "$CONF"); [ "$b" = "$now" ] && return 0; now=$b
  done
}
# keptOther H: a kept configuration ($APPLIED) is there, and it is not H; sets kept to its hash.
keptOther() { kept=$(hashOf "$APPLIED"); [ -f "$APPLIED/slurm.conf" ] && [ "$kept" != "$1" ]; }
start() {
  install "$CONF"; want=$(hashOf "$WORK"); tried=$(confsum "$CONF")
  launch; rc=$?
  [ $rc = 0 ] && return 0
  if [ $rc = 1 ]; then # not hung: maybe a passing cause
    say "slurmctld did not start on configuration $want: trying again in ${START_RETRY_SECONDS:-5} s"
    sleep "${START_RETRY_SECONDS:-5}"
    launch && return 0
  fi
  refuse "$want"
  keptOther "$want" || return 1
  install "$APPLIED"; say "starting slurmctld on configuration $kept, the one it ran before"
  launch
}
until start; do
  report
  say "slurmctld is not running: starting it again when $CONF changes, or in ${RESTART_SECONDS:-60} s"
  i=0
  while [ $i -lt "${RESTART_SECONDS:-60}" ] && [ "$(confsum "$CONF")" = "$tried" ]; do
    sleep 1 & wait $!
    [ -n "$stopping" ] && end 0
    i=$((i + 1))
  done
  settled || end 0
done
# A SIGTERM while slurmctld started found no slurmctld to pass on to.
[ -n "$stopping" ] && kill -TERM "$(cat "$PIDFILE")"
running=$(hashOf "$WORK"); report
# Started on another configuration than the kept one (the last one slurmctld ran, so the
# one the workers were last sent): a reconfigure sends them this one.
if [ -z "$stopping" ] && keptOther "$running"; then
  say "slurmctld started on configuration $running, the workers were sent $kept: reconfiguring to send them $running"
  reconfigure
  case $? in
    0) say "slurmctld sent configuration $running to the workers" ;;
    1) say "slurmctld refused to reconfigure on configuration $running, which it runs: the workers keep theirs" ;;
  esac
fi
while :; do
  sleep "$POLL" & wait $!
  pid=$(cat "$PIDFILE" 2>/dev/null)
  if ! alive "$pid"; then
    sleep 1; again=$(cat "$PIDFILE" 2>/dev/null)
    alive "$again" || { say "slurmctld is not running: its PID file names '$again' (before: '$pid'; slurmctld processes here: $(ours))"; break; }
  fi
  [ -n "$stopping" ] && continue
  [ "$(wc -c <"$LOG")" -gt 67108864 ] && : >"$LOG"
  [ -n "$unreported" ] && report
  if keysChanged slurmctld hup; then
    install "$WORK"; reconfigure; [ $? = 2 ] && break
  fi
  [ "$(confsum "$CONF")" = "$tried" ] && continue
  settled || continue
  tried=$now; want=$(hashOf "$CONF")
  copyConf "$WORK" "$WORK.prev"; install "$CONF"
  say "slurmctld reconfigures with configuration $want"
  reconfigure
  case $? in
    0) running=$want; say "slurmctld runs configuration $want" ;;
    1) refuse "$want"; install "$WORK.prev" ;;
    *) break ;;
  esac
  report
done
[ -n "$stopping" ] && end 0
say "slurmctld ended"
end 1
`

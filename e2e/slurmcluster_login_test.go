package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/controller/slurmcluster"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// slapdScript runs inside the Slurm root (startRootDaemon): OpenLDAP's slapd (Debian's
// package) on 127.0.0.1:$PORT, LDAP over TLS (ldaps) with the certificate $CERT and key
// $KEY, read by anyone, its database on $DIR loaded from $LDIF, in the foreground (-d) so
// that SIGTERM stops it.
const slapdScript = `set -e
mkdir "$DIR/db"
# OpenSSH-LPK's schema (users' sshPublicKey, which sssd's ssh service reads); Debian's slapd
# does not ship it.
cat >"$DIR/openssh-lpk.schema" <<'SCHEMA'
attributetype ( 1.3.6.1.4.1.24552.500.1.1.1.13 NAME 'sshPublicKey'
  DESC 'OpenSSH public key' EQUALITY octetStringMatch
  SYNTAX 1.3.6.1.4.1.1466.115.121.1.40 )
objectclass ( 1.3.6.1.4.1.24552.500.1.1.2.0 NAME 'ldapPublicKey' SUP top AUXILIARY
  DESC 'OpenSSH LPK objectclass' MAY ( sshPublicKey $ uid ) )
SCHEMA
printf '%s\n' "$CERT" >"$DIR/server.crt"
(umask 077 && printf '%s\n' "$KEY" >"$DIR/server.key")
cat >"$DIR/slapd.conf" <<CONF
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/nis.schema
include /etc/ldap/schema/inetorgperson.schema
include $DIR/openssh-lpk.schema
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile $DIR/slapd.pid
TLSCertificateFile $DIR/server.crt
TLSCertificateKeyFile $DIR/server.key
database mdb
maxsize 16777216
suffix "dc=kubeslurm,dc=test"
directory $DIR/db
access to * by * read
CONF
printf '%s\n' "$LDIF" >"$DIR/directory.ldif"
slapadd -f "$DIR/slapd.conf" -l "$DIR/directory.ldif"
exec slapd -f "$DIR/slapd.conf" -h "ldaps://127.0.0.1:$PORT/" -d 0
`

// alicePassword is alice's password in the test directory (a simple bind checks it).
const alicePassword = "wonderland-42"

// directoryLDIF is the test directory: user alice (uid 20001, her password alicePassword,
// her ssh public key aliceKey, an authorized_keys line) in group hpc (gid 20000), neither of
// them in the Slurm root's /etc/passwd or /etc/group.
func directoryLDIF(aliceKey string) string {
	return `dn: dc=kubeslurm,dc=test
objectClass: dcObject
objectClass: organization
o: kubeslurm
dc: kubeslurm

dn: ou=people,dc=kubeslurm,dc=test
objectClass: organizationalUnit
ou: people

dn: ou=groups,dc=kubeslurm,dc=test
objectClass: organizationalUnit
ou: groups

dn: uid=alice,ou=people,dc=kubeslurm,dc=test
objectClass: inetOrgPerson
objectClass: posixAccount
objectClass: ldapPublicKey
uid: alice
cn: Alice
sn: Liddell
uidNumber: 20001
gidNumber: 20000
homeDirectory: /home/alice
loginShell: /bin/sh
userPassword: ` + alicePassword + `
sshPublicKey: ` + aliceKey + `

dn: cn=hpc,ou=groups,dc=kubeslurm,dc=test
objectClass: posixGroup
cn: hpc
gidNumber: 20000
memberUid: alice`
}

// execInPod runs command in a running container of a pod of the pod runner, as `kubectl
// exec` would: in the container's mount and UTS namespaces and root (nsenter on its main
// process, whose PID is its container ID), as root. It returns the combined output.
func execInPod(t *testing.T, ns, pod, container string, command ...string) (string, error) {
	t.Helper()
	p, err := kube.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	require.NoError(t, err)
	for _, s := range p.Status.ContainerStatuses {
		if s.Name != container || s.State.Running == nil {
			continue
		}
		pid, ok := strings.CutPrefix(s.ContainerID, "podrunner://")
		require.True(t, ok, "container %s of %s: ID %q", container, pod, s.ContainerID)
		out, err := exec.Command("nsenter", append([]string{"--target", pid, "--mount", "--uts", "--root", "--wd", "--"}, command...)...).CombinedOutput()
		return string(out), err
	}
	return "", fmt.Errorf("container %s of pod %s is not running", container, pod)
}

// Issue 5, login pods: with a LoginSet's sssdConfRef, the login pod runs sssd with that
// configuration, so the users of a directory (OpenLDAP's slapd here, started by the test,
// reached over TLS and checked against the CA the Secret holds beside sssd.conf) exist in
// it; one of them submits a job there, and it runs under the directory's uid and gid on a
// worker that has no directory of its own.
func TestSlurmClusterLoginSSSD(t *testing.T) {
	ctx := context.Background()
	startPodRunner(t)
	ns := namespace(t)
	_, aliceKey, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	aliceSigner, err := ssh.NewSignerFromKey(aliceKey)
	require.NoError(t, err)
	// The directory's certificate, for 127.0.0.1 (the example's ldap_uri), signed by a CA of
	// its own, which goes in the example's ca.crt in place of the user's.
	chain, serverKey, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", nil, nil)
	require.NoError(t, err)
	serverCert, rest := pem.Decode(chain)
	require.NotNil(t, serverCert)
	caCert, _ := pem.Decode(rest)
	require.NotNil(t, caCert, "the chain's second certificate: its CA")
	startRootDaemon(t, "slapd", 3636, slapdScript,
		"LDIF="+directoryLDIF(strings.TrimSpace(string(ssh.MarshalAuthorizedKey(aliceSigner.PublicKey())))),
		"CERT="+string(pem.EncodeToMemory(serverCert)), "KEY="+string(serverKey))
	applyEditedExample(t, ns, "slurmcluster-login-sssd.yaml", func(example string) string {
		placeholder := regexp.MustCompile(`(?m)^    -----BEGIN CERTIFICATE-----\n(    .*\n)*?    -----END CERTIFICATE-----\n`)
		require.Len(t, placeholder.FindAllString(example, -1), 1, "the example's ca.crt")
		ca := "    " + strings.ReplaceAll(strings.TrimSpace(string(pem.EncodeToMemory(caCert))), "\n", "\n    ") + "\n"
		return placeholder.ReplaceAllLiteralString(example, ca)
	})
	t.Cleanup(func() {
		if t.Failed() {
			logDaemons(t, ns, "sssd", "login", "slurmctld", "slurmd")
		}
	})
	c := waitSlurmClusterReady(t, ns, runnerNode)

	var login string
	eventually(t, 90*time.Second, "the login pod ready", func() bool {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "slurm.kubeslurm.io/loginset=users"})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.ContainerStatuses == nil {
			return false
		}
		login = pods.Items[0].Name
		for _, s := range pods.Items[0].Status.ContainerStatuses {
			if !s.Ready {
				return false
			}
		}
		return true
	})
	kc := slurmClient(t)
	key := client.ObjectKey{Namespace: ns, Name: "slurm"}
	loginsReady := func(reason, message string) func() bool {
		return func() bool {
			cond := meta.FindStatusCondition(c.Status.Conditions, slurmv1.ConditionLoginsReady)
			return kc.Get(ctx, key, c) == nil && cond != nil && cond.Reason == reason && cond.Message == message
		}
	}
	eventually(t, 60*time.Second, "LoginsReady: 1/1 login pods ready", loginsReady(slurmcluster.ReasonLoginsRunning, "1/1 login pods ready"))
	// `kubectl get slurmcluster -o wide` prints it in LOGINS.
	out, err := adminKubectl("-n", ns, "get", "slurmcluster", "slurm", "-o", "wide")
	require.NoError(t, err, out)
	assert.Regexp(t, `(?m)^NAME\s+CLUSTER\s+CONTROLLER\s+READY\s+WORKERS\s+NODES\s+CONFIG\s+KEYS\s+ACCOUNTING\s+LOGINS\s+DOMAIN\s`, out)
	assert.Regexp(t, `(?m)^slurm\s+sssd\s+True\s+1\s+1\s+idle=1\s+True\s+True\s+True\s`, out, "LOGINS True (no ACCOUNTING value)")
	inLogin := func(command ...string) (string, error) { return execInPod(t, ns, login, "login", command...) }

	// sssd answers for the directory's user (it may still be going online at first).
	eventually(t, 60*time.Second, "getent passwd alice in the login pod", func() bool {
		out, _ = inLogin("/usr/bin/getent", "passwd", "alice")
		return strings.HasPrefix(out, "alice:*:20001:20000:")
	})
	out, err = inLogin("/usr/bin/id", "alice")
	require.NoError(t, err, out)
	assert.Equal(t, "uid=20001(alice) gid=20000(hpc) groups=20000(hpc)", strings.TrimSpace(out))
	out, err = inLogin("/usr/bin/getent", "passwd", "bob")
	assert.Error(t, err, "a user the directory does not have: %s", out)

	// An edit of the sssd.conf Secret reaches sssd, which reads its configuration only when
	// it starts: its script restarts it, in the same container. (getent past the memory
	// cache, which may hold the old answer for minutes.)
	loginPod := []daemon{{pod: login, uid: string(getPod(t, ns, login).UID)}}
	before := restarts(t, ns, loginPod)
	secret, err := kube.CoreV1().Secrets(ns).Get(ctx, "sssd-conf", metav1.GetOptions{})
	require.NoError(t, err)
	conf := string(secret.Data["sssd.conf"])
	require.Contains(t, conf, "\n[domain/directory]\n")
	secret.Data["sssd.conf"] = []byte(strings.Replace(conf, "\n[domain/directory]\n", "\n[domain/directory]\noverride_shell = /bin/bash\n", 1))
	_, err = kube.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{})
	require.NoError(t, err)
	eventually(t, 90*time.Second, "getent passwd alice gives the shell the edited sssd.conf sets", func() bool {
		out, _ = inLogin("/usr/bin/env", "SSS_NSS_USE_MEMCACHE=NO", "/usr/bin/getent", "passwd", "alice")
		return strings.HasPrefix(out, "alice:*:20001:20000:") && strings.HasSuffix(strings.TrimSpace(out), ":/bin/bash")
	})
	assert.Equal(t, before, restarts(t, ns, loginPod), "no container restarted")

	// alice's job checks, on the worker, that it runs as her uid and group.
	out, err = inLogin("/usr/sbin/runuser", "-u", "alice", "--", "/usr/bin/sbatch", "--chdir", "/tmp", "--output", "/dev/null",
		"--wrap", `test "$(id -u)" = 20001 && test "$(id -g)" = 20000`)
	require.NoError(t, err, out)
	m := regexp.MustCompile(`Submitted batch job (\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	id, _ := strconv.Atoi(m[1])
	show := waitClusterJobCompleted(t, c, m[1])
	// Outside the login pod the ids have no names; inside, scontrol names them.
	assert.Equal(t, "20001(20001)", regexpField(show, "UserId"), show)
	show, err = inLogin("/usr/bin/scontrol", "show", "job", "-o", m[1])
	require.NoError(t, err, show)
	assert.Equal(t, "alice(20001)", regexpField(show, "UserId"), show)
	assert.Equal(t, "hpc(20000)", regexpField(show, "GroupId"), show)

	// squeue, in the login pod, names her jobs' user.
	out, err = inLogin("/usr/sbin/runuser", "-u", "alice", "--", "/usr/bin/squeue", "-h", "-t", "all", "-j", strconv.Itoa(id), "-o", "%u %i")
	require.NoError(t, err, out)
	assert.Equal(t, fmt.Sprintf("alice %d", id), strings.TrimSpace(out))

	// The example's shared home (claim "home" at /home in the login and worker pods): the
	// admin opens the claim's root (0770 root's on the local cluster) to everyone; each
	// user's own directory is made at her first login (pam_mkhomedir). The login pod checks
	// that /home is a mount of its own: without one, both sides would share the Slurm root's
	// /home on this one host.
	mountedHome := `grep -q " /home " /proc/self/mountinfo`
	out, err = inLogin("/bin/sh", "-c", mountedHome+" && chmod 0755 /home && test ! -e /home/alice")
	require.NoError(t, err, "/home is a mount in the login pod, without a home for alice yet: %s", out)

	// ssh: alice logs in to the login pod's sshd with her directory password (PAM, pam_sss)
	// and submits there; the host key is the one of the Secret the controller generated,
	// and a replacement login pod presents it too. Her session starts in her new home.
	hostKey := loginHostKey(t, ns, c)
	out, err = sshRun(t, "alice", ssh.Password(alicePassword), hostKey, `id -un; id -gn; pwd; sbatch --parsable --chdir /tmp --output /dev/null --wrap 'test "$(id -u)" = 20001'`)
	require.NoError(t, err, out)
	lines := strings.Fields(out)
	require.Len(t, lines, 4, out)
	assert.Equal(t, []string{"alice", "hpc", "/home/alice"}, lines[:3])
	out, err = inLogin("/usr/bin/stat", "-c", "%u:%g %F", "/home/alice")
	require.NoError(t, err, out)
	assert.Equal(t, "20001:20000 directory", strings.TrimSpace(out), "her home, made at her first login")
	show = waitClusterJobCompleted(t, c, lines[3])
	assert.Equal(t, "20001(20001)", regexpField(show, "UserId"), show)
	out, err = sshRun(t, "alice", ssh.Password("not-her-password"), hostKey, "true")
	assert.ErrorContains(t, err, "unable to authenticate", "a wrong password is refused: %s", out)
	// Her public key, from the directory through sssd's ssh service, logs her in too; another
	// key does not.
	out, err = sshRun(t, "alice", ssh.PublicKeys(aliceSigner), hostKey, "id -un")
	require.NoError(t, err, out)
	assert.Equal(t, "alice", strings.TrimSpace(out))
	_, otherKey, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	otherSigner, err := ssh.NewSignerFromKey(otherKey)
	require.NoError(t, err)
	out, err = sshRun(t, "alice", ssh.PublicKeys(otherSigner), hostKey, "true")
	assert.ErrorContains(t, err, "unable to authenticate", "a key the directory does not hold is refused: %s", out)

	// An interactive step: srun on the login pod, its task on the worker, which connects
	// back to srun for its output.
	out, err = sshRun(t, "alice", ssh.PublicKeys(aliceSigner), hostKey, "srun -N1 --chdir /tmp id -u")
	require.NoError(t, err, out)
	assert.Equal(t, "20001", strings.TrimSpace(out))

	// What alice writes in her home on the login pod, her job reads on the worker (which
	// checks that /home is a mount of its own too), and what the job writes, she reads back.
	out, err = sshRun(t, "alice", ssh.PublicKeys(aliceSigner), hostKey,
		`echo from-login > /home/alice/in.txt && sbatch --parsable --chdir /home/alice --output /dev/null --wrap '`+mountedHome+` && cp in.txt out.txt'`)
	require.NoError(t, err, out)
	waitClusterJobCompleted(t, c, strings.TrimSpace(out))
	out, err = sshRun(t, "alice", ssh.PublicKeys(aliceSigner), hostKey, "cat /home/alice/out.txt")
	require.NoError(t, err, out)
	assert.Equal(t, "from-login", strings.TrimSpace(out), "the job's file, written on the worker")

	require.NoError(t, kube.CoreV1().Pods(ns).Delete(ctx, login, metav1.DeleteOptions{}))
	eventually(t, 90*time.Second, "a new login pod's sshd answers with the same host key", func() bool {
		out, err = sshRun(t, "alice", ssh.Password(alicePassword), hostKey, "id -u")
		return err == nil && strings.TrimSpace(out) == "20001"
	})

	// ssh without a directory has nobody to log in as: the API server refuses it.
	require.NoError(t, kc.Get(ctx, key, c))
	c.Spec.LoginSets = append(c.Spec.LoginSets, slurmv1.LoginSetSpec{Name: "nobody", SSH: &slurmv1.LoginSSHSpec{}})
	assert.ErrorContains(t, kc.Update(ctx, c), "ssh needs sssdConfRef")

	// A LoginSet whose sssd.conf Secret does not exist is named in LoginsReady, with a
	// warning event; without it, the condition is back.
	updateCluster(t, kc, key, c, func(c *slurmv1.SlurmCluster) {
		c.Spec.LoginSets = append(c.Spec.LoginSets, slurmv1.LoginSetSpec{Name: "lab", SSSDConfRef: &v1.SecretKeySelector{
			LocalObjectReference: v1.LocalObjectReference{Name: "lab-sssd"}, Key: "sssd.conf"}})
	})
	missing := "Secret lab-sssd of loginSets[lab].sssdConfRef does not exist: the LoginSet's pods wait for it"
	eventually(t, 60*time.Second, "LoginsReady: "+missing, loginsReady(slurmcluster.ReasonSSSDConfMissing, missing))
	eventually(t, 30*time.Second, "event SlurmLoginNotReady", func() bool {
		return strings.Contains(namedClusterEvents(t, ns, "slurm", wellknown.EventSlurmLoginNotReady), missing)
	})
	updateCluster(t, kc, key, c, func(c *slurmv1.SlurmCluster) { c.Spec.LoginSets = c.Spec.LoginSets[:1] })
	eventually(t, 60*time.Second, "LoginsReady: 1/1 login pods ready again", loginsReady(slurmcluster.ReasonLoginsRunning, "1/1 login pods ready"))
}

// loginSSHAddr is where the example's login pod's sshd listens (the pod runner's pods share
// the host's network).
const loginSSHAddr = "127.0.0.1:2222"

// loginHostKey is the public half of the ssh host key Secret the controller generated for
// c's login pods (the test reads it as the cluster's admin; the controller cannot).
func loginHostKey(t *testing.T, ns string, c *slurmv1.SlurmCluster) ssh.PublicKey {
	t.Helper()
	s, err := kube.CoreV1().Secrets(ns).Get(context.Background(), slurmcluster.SSHHostKeySecret(c), metav1.GetOptions{})
	require.NoError(t, err)
	key, err := ssh.ParsePrivateKey(s.Data[slurmcluster.SSHHostKeyName])
	require.NoError(t, err)
	return key.PublicKey()
}

// sshRun runs command in a session as user, authenticated by auth, on the login pod's sshd,
// which must present hostKey; it returns the session's combined output.
func sshRun(t *testing.T, user string, auth ssh.AuthMethod, hostKey ssh.PublicKey, command string) (string, error) {
	t.Helper()
	conn, err := ssh.Dial("tcp", loginSSHAddr, &ssh.ClientConfig{User: user, Auth: []ssh.AuthMethod{auth},
		HostKeyCallback: ssh.FixedHostKey(hostKey), Timeout: 10 * time.Second})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	session, err := conn.NewSession()
	if err != nil {
		return "", err
	}
	defer session.Close()
	out, err := session.CombinedOutput(command)
	return string(out), err
}

// waitClusterJobCompleted waits until job id of c's Slurm has ended, asserts that it
// COMPLETED, and returns its `scontrol show job -o` line.
func waitClusterJobCompleted(t *testing.T, c *slurmv1.SlurmCluster, id string) string {
	t.Helper()
	var show string
	eventually(t, 90*time.Second, "job "+id+" ended", func() bool {
		show, _ = slurmCommand(t, c, "/usr/bin/scontrol", "show", "job", "-o", id)
		return regexpField(show, "JobState") == "COMPLETED" || regexpField(show, "JobState") == "FAILED"
	})
	assert.Equal(t, "COMPLETED", regexpField(show, "JobState"), show)
	return show
}

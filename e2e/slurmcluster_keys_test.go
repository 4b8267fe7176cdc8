package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/controller/slurmcluster"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// jwk is one key of Slurm's slurm.jwks.
type jwk struct {
	Kty string `json:"kty"`
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	K   string `json:"k"`
	Use string `json:"use,omitempty"`
}

// keySet is slurm.jwks of keys (kid → key), the one named def the default (signing) key.
func keySet(t *testing.T, def string, keys map[string][]byte) []byte {
	t.Helper()
	var set struct {
		Keys []jwk `json:"keys"`
	}
	for _, kid := range sortedKeys(keys) {
		k := jwk{Kty: "oct", Alg: "HS256", Kid: kid, K: base64.RawURLEncoding.EncodeToString(keys[kid])}
		if kid == def {
			k.Use = "default"
		}
		set.Keys = append(set.Keys, k)
	}
	b, err := json.Marshal(set)
	require.NoError(t, err)
	return b
}

// containerLog is what container of pod ns/pod wrote, under whichever pod runner ran it.
func containerLog(t *testing.T, ns, pod, container string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(runDir, "*", "logs", ns+"_"+pod+"_"+container+".log"))
	require.NoError(t, err)
	var all strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		all.Write(b)
	}
	return all.String()
}

// reloaded matches a daemon script's line saying the daemon reads its keys again (the
// pod runner's header line, which quotes the script, does not start with it).
var reloaded = regexp.MustCompile(`(?m)^kubeslurm: the key files in .* changed`)

// daemon is one Slurm daemon's container of a SlurmCluster (named as its component), as
// the test found it.
type daemon struct {
	pod, container string
	uid            string
}

// reloads is how many times d's script has logged that its daemon reads its keys again.
func reloads(t *testing.T, ns string, d daemon) int {
	return len(reloaded.FindAllString(containerLog(t, ns, d.pod, d.container), -1))
}

// daemonOf is the first of daemons whose container is component's.
func daemonOf(t *testing.T, daemons []daemon, component string) daemon {
	t.Helper()
	for _, d := range daemons {
		if d.container == component {
			return d
		}
	}
	require.Failf(t, "no daemon", "no %s among %v", component, daemons)
	return daemon{}
}

// clusterDaemons lists the live pods of the SlurmCluster's components (slurmctld, slurmd,
// login, slurmdbd: each pod's daemon container is named as its component).
func clusterDaemons(t *testing.T, ns string, components ...string) []daemon {
	t.Helper()
	var out []daemon
	for _, component := range components {
		pods, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: wellknown.SlurmComponentLabel + "=" + component})
		require.NoError(t, err)
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				out = append(out, daemon{pod: p.Name, container: component, uid: string(p.UID)})
			}
		}
	}
	return out
}

// restarts is each daemon's container restarts, by pod and container, failing if a pod
// was replaced.
func restarts(t *testing.T, ns string, daemons []daemon) map[string]int32 {
	t.Helper()
	out := map[string]int32{}
	for _, d := range daemons {
		p, err := kube.CoreV1().Pods(ns).Get(context.Background(), d.pod, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, d.uid, string(p.UID), "pod %s replaced", d.pod)
		for _, s := range p.Status.ContainerStatuses {
			out[d.pod+"/"+s.Name] = s.RestartCount
		}
	}
	return out
}

// keySecretData is the cluster's auth/slurm key Secret's data under key.
func keySecretData(t *testing.T, c *slurmv1.SlurmCluster, key string) []byte {
	t.Helper()
	name, _ := slurmcluster.SlurmKeySecret(c)
	secret, err := kube.CoreV1().Secrets(c.Namespace).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return secret.Data[key]
}

// writeSecretData writes value under key into Secret ns/name (an edit in place, as
// `kubectl patch` makes it).
func writeSecretData(ns, name, key string, value []byte) error {
	ctx := context.Background()
	secret, err := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	secret.Data[key] = value
	_, err = kube.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{})
	return err
}

// writeKeySet writes set as slurm.jwks into the cluster's auth/slurm key Secret.
func writeKeySet(c *slurmv1.SlurmCluster, set []byte) error {
	name, _ := slurmcluster.SlurmKeySecret(c)
	return writeSecretData(c.Namespace, name, slurmcluster.SlurmJWKSName, set)
}

// rotateSlurmKey rotates the cluster's auth/slurm key by editing its Secret in place, in
// Slurm's three steps (docs/slurm-cluster.md, "Rotating the auth/slurm key in place"),
// each waited out until every one of daemons has logged that it read the keys again and
// every worker is back in sinfo.
func rotateSlurmKey(t *testing.T, c *slurmv1.SlurmCluster, daemons []daemon) {
	t.Helper()
	oldKey := keySecretData(t, c, slurmcluster.SlurmKeyName)
	require.NotEmpty(t, oldKey)
	newKey := make([]byte, 64)
	_, err := rand.Read(newKey)
	require.NoError(t, err)
	workers := 0
	for _, d := range daemons {
		if d.container == "slurmd" {
			workers++
		}
	}
	for i, step := range []struct {
		what string
		set  []byte
	}{
		{"add the new key (the old one signs)", keySet(t, "old", map[string][]byte{"old": oldKey, "new": newKey})},
		{"the new key signs (the old one still accepted)", keySet(t, "new", map[string][]byte{"old": oldKey, "new": newKey})},
		{"drop the old key", keySet(t, "new", map[string][]byte{"new": newKey})},
	} {
		require.NoError(t, writeKeySet(c, step.set))
		start := time.Now()
		eventually(t, 90*time.Second, fmt.Sprintf("step %d (%s): every daemon read the keys again", i+1, step.what), func() bool {
			for _, d := range daemons {
				if reloads(t, c.Namespace, d) < i+1 {
					return false
				}
			}
			return true
		})
		t.Logf("step %d (%s): all %d daemons reloaded after %s", i+1, step.what, len(daemons), time.Since(start).Round(time.Second))
		// Let the re-executed daemons settle before the next step relies on them.
		eventually(t, 60*time.Second, "every worker back in sinfo", func() bool {
			out, _ := slurmCommand(t, c, "/usr/bin/sinfo", "-h", "-N", "-o", "%N %t")
			return len(regexp.MustCompile(`(?m) (idle|mix|alloc)$`).FindAllString(out, -1)) == workers
		})
	}
}

// Issue 5, configuration propagation of a referenced Secret: the auth/slurm key rotated by
// editing its Secret in place, in Slurm's three steps (slurm.jwks: add the new key, make it
// the default, drop the old one). Each running daemon (slurmctld, both slurmd, the login
// pod's sackd) reads its keys again after each edit, with no pod replaced or restarted and
// a running job kept; a job goes in through sackd (which signs with the key it read last).
// Then a worker is replaced: its new slurmd, holding the new key alone, registers (only
// with a slurmctld that has the new key) and runs a two-node job with the slurmd that
// never restarted (which must hold the new key to accept slurmctld's credential).
func TestSlurmClusterKeyRotation(t *testing.T) {
	ctx := context.Background()
	ns, c := twoRunnerCluster(t)
	var daemons []daemon
	eventually(t, 90*time.Second, "slurmctld, two slurmd and a login pod run", func() bool {
		daemons = clusterDaemons(t, ns, "slurmctld", "slurmd", "login")
		return len(daemons) == 4
	})
	login := daemonOf(t, daemons, "login").pod
	eventually(t, 90*time.Second, "the login pod answers sinfo", func() bool {
		_, err := execInPod(t, ns, login, "login", "/usr/bin/sinfo")
		return err == nil
	})

	running := clusterSbatch(t, c, "-N1", "-w", runnerNode, "--chdir", "/tmp", "--output", "/dev/null", "--wrap", "sleep 900")
	// Before the cluster goes: its worker's deletion would wait for the job.
	t.Cleanup(func() { _, _ = slurmCommand(t, c, "/usr/bin/scancel", running) })
	eventually(t, 60*time.Second, "job "+running+" RUNNING", func() bool {
		show, _ := slurmCommand(t, c, "/usr/bin/scontrol", "show", "job", "-o", running)
		return regexpField(show, "JobState") == "RUNNING"
	})

	before := restarts(t, ns, daemons)
	rotateSlurmKey(t, c, daemons)

	show, _ := slurmCommand(t, c, "/usr/bin/scontrol", "show", "job", "-o", running)
	assert.Equal(t, "RUNNING", regexpField(show, "JobState"), "the job that ran through the rotation: %s", show)
	// It holds its node's memory: the two-node job needs both nodes.
	_, ok := slurmCommand(t, c, "/usr/bin/scancel", running)
	require.True(t, ok)

	out, err := execInPod(t, ns, login, "login", "/usr/bin/sbatch", "--parsable", "--chdir", "/tmp", "--output", "/dev/null", "--wrap", "true")
	require.NoError(t, err, "sbatch through the login pod's sackd: %s", out)
	waitClusterJobCompleted(t, c, strings.TrimSpace(out))

	// Nothing was replaced or restarted: the keys were read again in place.
	assert.ElementsMatch(t, daemons, clusterDaemons(t, ns, "slurmctld", "slurmd", "login"), "the same pods")
	assert.Equal(t, before, restarts(t, ns, daemons), "container restarts")

	// A worker that starts now holds the new key alone: it registers only with a slurmctld
	// that reads it, and runs a job step beside a slurmd that did not restart.
	var old daemon
	for _, d := range daemons {
		if d.container == "slurmd" && strings.Contains(d.pod, runnerNode2) {
			old = d
		}
	}
	require.NotEmpty(t, old.pod)
	require.NoError(t, kube.CoreV1().Pods(ns).Delete(ctx, old.pod, metav1.DeleteOptions{}))
	eventually(t, 120*time.Second, "worker "+old.pod+" replaced, and the new one ready", func() bool {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, old.pod, metav1.GetOptions{})
		return err == nil && string(p.UID) != old.uid && podReady(p)
	})
	eventually(t, 90*time.Second, "both workers idle in sinfo", func() bool {
		out, _ := slurmCommand(t, c, "/usr/bin/sinfo", "-h", "-N", "-o", "%N %t")
		return strings.Contains(out, runnerNode+" idle") && strings.Contains(out, runnerNode2+" idle")
	})
	show = waitClusterJobCompleted(t, c, clusterSbatch(t, c, "-N2", "--chdir", "/tmp", "--output", "/dev/null", "--wrap", "srun -N2 true"))
	t.Logf("after the rotation, with a new worker: a two-node job %s on %s", regexpField(show, "JobState"), regexpField(show, "NodeList"))

	jwtKeyRotated(t, c, daemonOf(t, daemons, "slurmctld"))
	keySetRefused(t, c)
}

// jwtKeyRotated: the cluster's JWT key replaced in its Secret in place. slurmctld reads it
// again without a restart; from then on a token made with the new key is accepted and one
// made with the old key is refused.
func jwtKeyRotated(t *testing.T, c *slurmv1.SlurmCluster, slurmctld daemon) {
	oldToken := clusterToken(t, c)
	before := reloads(t, c.Namespace, slurmctld)
	newKey := make([]byte, 64)
	_, err := rand.Read(newKey)
	require.NoError(t, err)
	name, key := slurmcluster.JWTKeySecret(c)
	require.NoError(t, writeSecretData(c.Namespace, name, key, newKey))
	start := time.Now()
	eventually(t, 90*time.Second, "slurmctld read the new JWT key", func() bool {
		return reloads(t, c.Namespace, slurmctld) > before
	})
	t.Logf("JWT key replaced: slurmctld read it again after %s", time.Since(start).Round(time.Second))
	eventually(t, 60*time.Second, "squeue with a token of the new JWT key", func() bool {
		_, ok := slurmCommand(t, c, "/usr/bin/squeue")
		return ok
	})
	out, ok := slurmCommandWithToken(t, c, oldToken, "/usr/bin/squeue")
	assert.False(t, ok, "squeue with a token of the old JWT key: %s", out)
}

// keySetRefused: bad input, key sets Slurm would refuse (two default keys, a short key)
// written into the cluster's key Secret, are refused by kubeslurm's admission webhook with
// the reason; so is any key set while the controller, which serves the webhook, is down
// (fail closed). The Secret keeps the set the daemons run with.
func keySetRefused(t *testing.T, c *slurmv1.SlurmCluster) {
	good := keySecretData(t, c, slurmcluster.SlurmJWKSName)
	require.NotEmpty(t, good)
	key := func(kid string, size int, extra string) string {
		b := make([]byte, size)
		_, err := rand.Read(b)
		require.NoError(t, err)
		return `{"kty":"oct","alg":"HS256","kid":"` + kid + `","k":"` + base64.RawURLEncoding.EncodeToString(b) + `"` + extra + `}`
	}
	for _, bad := range []struct{ what, set, why string }{
		{"two default keys", `{"keys":[` + key("a", 32, `,"use":"default"`) + `,` + key("b", 32, `,"use":"default"`) + `]}`, "a second default key"},
		{"a 12-byte key", `{"keys":[` + key("a", 12, "") + `]}`, "auth/slurm wants at least 16"},
	} {
		err := writeKeySet(c, []byte(bad.set))
		require.Error(t, err, "a key set with %s written", bad.what)
		assert.Contains(t, err.Error(), bad.why)
		t.Logf("a key set with %s: %v", bad.what, err)
	}

	component(t, "stop", "controller")
	err := writeKeySet(c, []byte(`{"keys":[`+key("a", 32, "")+`]}`))
	component(t, "start", "controller")
	require.Error(t, err, "a key set written while the webhook is down")
	t.Logf("a key set written while the controller is down: %v", err)
	assert.Equal(t, good, keySecretData(t, c, slurmcluster.SlurmJWKSName), "the key set in the Secret")
}

package e2e

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/controller/slurmcluster"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// slurmClusterColumns is the header of `kubectl get slurmcluster` (the CRD's printer columns).
const slurmClusterColumns = `(?m)^NAME\s+CONTROLLER\s+READY\s+WORKERS\s+NODES\s+CONFIG\s+KEYS\s+DOMAIN\s+RECONFIGURED\s+AGE$`

// controllerIdentity is the running controller's Slurm signing key (made at its start, in
// the Secret its default flag names), read as admin.
func controllerIdentity(t *testing.T) *slurmcluster.Identity {
	t.Helper()
	kc := slurmClient(t)
	s := &v1.Secret{}
	key := client.ObjectKey{Namespace: "kubeslurm-system", Name: "kubeslurm-slurm-signing-key"}
	require.NoError(t, kc.Get(context.Background(), key, s), "the controller makes its signing key when it starts")
	id, err := slurmcluster.LoadIdentity(context.Background(), kc, kc, key.Namespace, key.Name)
	require.NoError(t, err)
	return id
}

// slurmClient is a controller-runtime client that knows SlurmClusters.
func slurmClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, slurmv1.AddToScheme(scheme))
	c, err := client.New(adminConfig, client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

// The example SlurmCluster, applied to the real API server, gets its key Secrets and its
// rendered ConfigMap from the running controller; a partition change reaches the ConfigMap
// with an event; a refused extra-config line sets ConfigValid False and keeps the ConfigMap.
func TestSlurmClusterKeysAndConfig(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	kc := slurmClient(t)
	applyExample(t, ns, "slurmcluster.yaml")
	key := client.ObjectKey{Namespace: ns, Name: "slurm"}

	get := func() *slurmv1.SlurmCluster {
		c := &slurmv1.SlurmCluster{}
		require.NoError(t, kc.Get(ctx, key, c))
		return c
	}
	configMap := func() *v1.ConfigMap {
		cm := &v1.ConfigMap{}
		if err := kc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "slurm-slurm-config"}, cm); err != nil {
			return nil
		}
		return cm
	}
	eventually(t, 30*time.Second, "ConfigValid and KeysReady True", func() bool {
		c := get()
		return meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionConfigValid) &&
			meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionKeysReady)
	})
	c := get()
	keys := map[string][]byte{}
	for name, want := range map[string]struct {
		key  string
		size int
	}{"slurm-slurm-key": {"slurm.key", 1024}, "slurm-jwt-key": {"jwt_hs256.key", 64}} {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Len(t, s.Data[want.key], want.size, name)
		assert.True(t, metav1.IsControlledBy(s, c), "%s is owned by the SlurmCluster", name)
		keys[name] = s.Data[want.key]
	}
	// Each generated key has an event of its own, naming its Secret: events of one pass
	// would otherwise share a series, which shows only the first note.
	eventually(t, 30*time.Second, "an event for each generated key Secret", func() bool {
		list, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		related := map[string]string{}
		for _, e := range list.Items {
			if e.Regarding.Name == "slurm" && e.Reason == wellknown.EventSlurmKeyGenerated && e.Related != nil && e.Related.Kind == "Secret" {
				related[e.Related.Name] = e.Note
			}
		}
		return strings.Contains(related["slurm-slurm-key"], "Generated the auth/slurm key into Secret slurm-slurm-key") &&
			strings.Contains(related["slurm-jwt-key"], "Generated the auth/jwt key into Secret slurm-jwt-key")
	})

	cm := configMap()
	require.NotNil(t, cm)
	want, err := slurmconf.Render(c, slurmconf.WithJWKS(controllerIdentity(t).JWKS()))
	require.NoError(t, err)
	wantData := maps.Clone(map[string]string(want))
	wantData[slurmcluster.ConfigHashFile] = want.Hash() // for slurmctld's script
	assert.Equal(t, wantData, cm.Data, "the ConfigMap holds the spec as the API server returns it, rendered")
	conf := cm.Data["slurm.conf"]
	for _, line := range []string{
		"ClusterName=example", "SlurmctldHost=slurm-controller-0(slurm-controller." + ns + ".svc)",
		"SlurmctldParameters=enable_configless", "MaxNodeCount=256", "AuthType=auth/slurm", "AuthAltTypes=auth/jwt",
		"AuthAltParameters=jwks=/etc/slurm/jwks.json,jwt_key=/etc/slurm/jwt_hs256.key", "NodeSet=cpu Feature=cpu",
		"PartitionName=batch Nodes=cpu,gpu Default=YES MaxTime=1-00:00:00 State=UP PriorityTier=1 DefMemPerCPU=512",
		"PartitionName=gpu Nodes=gpu MaxTime=UNLIMITED State=UP PriorityTier=2", "SchedulerParameters=bf_interval=60",
		"Prolog=dcgm-job-mapping-prolog.sh", "Epilog=dcgm-job-mapping-epilog.sh", "PrologFlags=Alloc",
	} {
		assert.Contains(t, conf, line+"\n")
	}
	assert.Equal(t, cm.Annotations[wellknown.SlurmConfigHashAnnotation], c.Status.ConfigHash)
	kwokNodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	require.NoError(t, err)
	assert.EqualValues(t, len(kwokNodes.Items), c.Status.DesiredWorkers, "cpu: the kwok nodes; gpu: no node-pool=gpu node")
	assert.Equal(t, "# gres.conf of SlurmCluster "+ns+"/slurm, rendered by kubeslurm.\nAutoDetect=nvidia\n", cm.Data["gres.conf"])
	assert.Contains(t, conf, "\nGresTypes=gpu\n")
	assert.Contains(t, cm.Data["dcgm-job-mapping-prolog.sh"], "DIR=${DCGM_JOB_MAPPING_DIR:-/var/lib/dcgm-exporter/job-mapping}")

	// A partition's setting changes: the ConfigMap follows, with an event.
	oldHash := cm.Annotations[wellknown.SlurmConfigHashAnnotation]
	nodeKubectl(t, "-n", ns, "patch", "slurmcluster", "slurm", "--type=json",
		"-p", `[{"op":"replace","path":"/spec/partitions/1/maxTime","value":"60"}]`)
	eventually(t, 30*time.Second, "the ConfigMap has the gpu partition's new MaxTime", func() bool {
		cm = configMap()
		return strings.Contains(cm.Data["slurm.conf"], "PartitionName=gpu Nodes=gpu MaxTime=60 State=UP PriorityTier=2\n")
	})
	assert.NotEqual(t, oldHash, cm.Annotations[wellknown.SlurmConfigHashAnnotation])
	eventually(t, 30*time.Second, "status names the new configuration", func() bool {
		return get().Status.ConfigHash == cm.Annotations[wellknown.SlurmConfigHashAnnotation]
	})
	eventually(t, 30*time.Second, "a SlurmConfigUpdated event naming the old configuration", func() bool {
		return strings.Contains(clusterEvents(t, ns, wellknown.EventSlurmConfigUpdated), oldHash)
	})

	// A line that would override a key of ours is refused; the ConfigMap stays as it was.
	good := cm.DeepCopy()
	nodeKubectl(t, "-n", ns, "patch", "slurmcluster", "slurm", "--type=merge",
		"-p", `{"spec":{"extraConfig":"SchedulerParameters=bf_interval=60\nAuthType=auth/none\n","partitions":[{"name":"batch","maxTime":"30"}]}}`)
	eventually(t, 30*time.Second, "ConfigValid False", func() bool {
		return meta.IsStatusConditionFalse(get().Status.Conditions, slurmv1.ConditionConfigValid)
	})
	cond := meta.FindStatusCondition(get().Status.Conditions, slurmv1.ConditionConfigValid)
	assert.Equal(t, slurmcluster.ReasonInvalidConfig, cond.Reason)
	assert.Contains(t, cond.Message, "AuthType is set by kubeslurm")
	eventually(t, 30*time.Second, "a SlurmConfigRefused event", func() bool {
		return strings.Contains(clusterEvents(t, ns, wellknown.EventSlurmConfigRefused), "AuthType")
	})
	cm = configMap()
	assert.Equal(t, good.ResourceVersion, cm.ResourceVersion, "the old ConfigMap is unchanged")
	assert.Equal(t, good.Data, cm.Data)
	out, err := adminKubectl("-n", ns, "get", "slurmcluster", "slurm")
	require.NoError(t, err, out)
	t.Logf("kubectl get slurmcluster:\n%s", out)
	assert.Regexp(t, slurmClusterColumns, out)
	assert.Regexp(t, `(?m)^slurm\s+False\s+0\s+\d+\s+(<none>\s+)?False\s+True\s+`, out)

	// The keys were never rotated through all this.
	for name, k := range keys {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		for _, v := range s.Data {
			assert.Equal(t, k, v, "%s unchanged", name)
		}
	}
}

// clusterEvents is the notes of the events with the reason on SlurmCluster "slurm".
func clusterEvents(t *testing.T, ns, reason string) string {
	t.Helper()
	return namedClusterEvents(t, ns, "slurm", reason)
}

// namedClusterEvents is the notes of the events with the reason on a SlurmCluster.
func namedClusterEvents(t *testing.T, ns, name, reason string) string {
	t.Helper()
	list, err := kube.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "SlurmCluster" && e.Regarding.Name == name && e.Reason == reason {
			notes = append(notes, e.Note)
		}
	}
	return strings.Join(notes, "\n")
}

// clusterCondition is the SlurmCluster's condition of type typ as the API server has it
// now (nil if it has none).
func clusterCondition(t *testing.T, c *slurmv1.SlurmCluster, typ string) *metav1.Condition {
	t.Helper()
	got := &slurmv1.SlurmCluster{}
	require.NoError(t, slurmClient(t).Get(context.Background(), client.ObjectKeyFromObject(c), got))
	return meta.FindStatusCondition(got.Status.Conditions, typ)
}

// A key the spec references is never created by the controller, which cannot read Secrets:
// the real API server's dry-run create tells it the Secret is missing (KeysReady False,
// nothing written), then that it exists once the user makes it.
func TestSlurmClusterReferencedKey(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	kc := slurmClient(t)
	c := &slurmv1.SlurmCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ref"},
		Spec: slurmv1.SlurmClusterSpec{Auth: slurmv1.AuthSpec{
			JWTKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "site-jwt"}, Key: "jwt"}}},
	}
	require.NoError(t, kc.Create(ctx, c))
	keysReady := func() *metav1.Condition { return clusterCondition(t, c, slurmv1.ConditionKeysReady) }
	eventually(t, 30*time.Second, "KeysReady False", func() bool {
		cond := keysReady()
		return cond != nil && cond.Status == metav1.ConditionFalse
	})
	assert.Contains(t, keysReady().Message, "Secret site-jwt of the auth/jwt key (spec.auth) does not exist")
	_, err := kube.CoreV1().Secrets(ns).Get(ctx, "site-jwt", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the probe created nothing: %v", err)
	_, err = kube.CoreV1().Secrets(ns).Get(ctx, "ref-slurm-key", metav1.GetOptions{})
	assert.NoError(t, err, "the unreferenced key is generated")

	_, err = kube.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "site-jwt"},
		Data: map[string][]byte{"jwt": []byte("site")}}, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 60*time.Second, "KeysReady True once the Secret exists", func() bool {
		cond := keysReady()
		return cond != nil && cond.Status == metav1.ConditionTrue
	})
	s, err := kube.CoreV1().Secrets(ns).Get(ctx, "site-jwt", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []byte("site"), s.Data["jwt"], "the user's Secret is untouched")
}

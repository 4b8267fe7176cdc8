package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/computedomain"
	"github.com/kubeslurm/kubeslurm/pkg/controller/slurmcluster"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// NVIDIA ComputeDomains on the local cluster: it has no NVIDIA driver, so the ComputeDomain
// CRD is the chart's stand-in (manifests/local/computedomain-crd.yaml) and the tests write
// the status NVIDIA's driver would write.

var (
	computeDomainGVR = computedomain.GVK.GroupVersion().WithResource("computedomains")
	crdGVR           = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	computeDomainCRD = "computedomains.resource.nvidia.com"
)

func computeDomains(t *testing.T, ns string) dynamic.ResourceInterface {
	t.Helper()
	return dynamic.NewForConfigOrDie(adminConfig).Resource(computeDomainGVR).Namespace(ns)
}

// slurmClusterStatus reads a SlurmCluster and its ComputeDomainReady condition.
func slurmClusterStatus(t *testing.T, kc client.Client, ns, name string) (*slurmv1.SlurmCluster, metav1.Condition) {
	t.Helper()
	c := &slurmv1.SlurmCluster{}
	require.NoError(t, kc.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c))
	cond := meta.FindStatusCondition(c.Status.Conditions, slurmv1.ConditionComputeDomainReady)
	if cond == nil {
		return c, metav1.Condition{}
	}
	return c, *cond
}

// Issue test 2: the example SlurmCluster with a ComputeDomain gets one, numNodes 0 and its
// channel template, and SwitchType in slurm.conf; as nodes join and leave the domain (the
// status NVIDIA's driver writes) the SlurmCluster's status and condition follow, and the
// ComputeDomain's immutable spec is never written.
func TestComputeDomainFollowsWorkers(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	kc := slurmClient(t)
	applyExample(t, ns, "slurmcluster-computedomain.yaml")
	cds := computeDomains(t, ns)

	var cd *unstructured.Unstructured
	eventually(t, 30*time.Second, "ComputeDomain nvl72 created", func() bool {
		var err error
		cd, err = cds.Get(ctx, "nvl72", metav1.GetOptions{})
		return err == nil
	})
	spec, err := computedomain.ReadSpec(cd)
	require.NoError(t, err)
	assert.Equal(t, computedomain.Spec{NumNodes: 0, ResourceClaimTemplateName: "nvl72-channel", AllocationMode: "Single"}, spec)
	n, found, _ := unstructured.NestedInt64(cd.Object, "spec", "numNodes")
	assert.True(t, found, "numNodes written")
	assert.Zero(t, n)
	c, cond := slurmClusterStatus(t, kc, ns, "gpu")
	assert.True(t, metav1.IsControlledBy(cd, c), "owned by the SlurmCluster")
	generation := cd.GetGeneration()

	eventually(t, 30*time.Second, "ComputeDomainReady False: no status yet", func() bool {
		c, cond = slurmClusterStatus(t, kc, ns, "gpu")
		return cond.Reason == slurmcluster.ReasonComputeDomainNotReady && c.Status.ComputeDomain != nil
	})
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Contains(t, cond.Message, "no status yet")
	assert.Equal(t, slurmv1.ComputeDomainStatus{Name: "nvl72", ResourceClaimTemplateName: "nvl72-channel"}, *c.Status.ComputeDomain)
	assert.Contains(t, namedClusterEvents(t, ns, "gpu", wellknown.EventComputeDomainCreated), "Created ComputeDomain nvl72")
	cm := &v1.ConfigMap{}
	require.NoError(t, kc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gpu-slurm-config"}, cm))
	assert.Contains(t, cm.Data["slurm.conf"], "\nSwitchType=switch/nvidia_imex\n")

	// NVIDIA's driver: nodes join as worker pods claiming the channel start there, and leave.
	nodeEntry := func(name string, i int64) any {
		return map[string]any{"name": name, "ipAddress": "10.0.0." + name[len(name)-1:], "cliqueID": "fake.1", "index": i, "status": "Ready"}
	}
	for _, step := range []struct {
		what   string
		state  string
		nodes  []string
		cond   metav1.ConditionStatus
		reason string
	}{
		{"node-1 joins", "NotReady", []string{"node-1"}, metav1.ConditionFalse, slurmcluster.ReasonComputeDomainNotReady},
		{"node-2 joins, the domain is ready", "Ready", []string{"node-1", "node-2"}, metav1.ConditionTrue, slurmcluster.ReasonComputeDomainReady},
		{"node-1 leaves", "Ready", []string{"node-2"}, metav1.ConditionTrue, slurmcluster.ReasonComputeDomainReady},
	} {
		t.Logf("%s", step.what)
		cd, err = cds.Get(ctx, "nvl72", metav1.GetOptions{})
		require.NoError(t, err)
		var list []any
		for i, name := range step.nodes {
			list = append(list, nodeEntry(name, int64(i)))
		}
		cd.Object["status"] = map[string]any{"status": step.state, "nodes": list}
		_, err = cds.UpdateStatus(ctx, cd, metav1.UpdateOptions{})
		require.NoError(t, err)
		eventually(t, 40*time.Second, "SlurmCluster status after: "+step.what, func() bool {
			c, cond = slurmClusterStatus(t, kc, ns, "gpu")
			s := c.Status.ComputeDomain
			return s != nil && strings.Join(s.Nodes, ",") == strings.Join(step.nodes, ",") &&
				s.NodeCount == int32(len(step.nodes)) && s.Status == step.state && cond.Reason == step.reason
		})
		assert.Equal(t, step.cond, cond.Status)
		assert.Contains(t, cond.Message, strings.Join(step.nodes, ","))
	}
	out, err := adminKubectl("-n", ns, "get", "slurmcluster", "gpu")
	require.NoError(t, err, out)
	t.Logf("kubectl get slurmcluster:\n%s", out)
	assert.Regexp(t, slurmClusterColumns, out)
	assert.Regexp(t, `(?m)^gpu\s+False\s+0\s+\d+\s+(<none>\s+)?True\s+True\s+1\s+`, out)

	cd, err = cds.Get(ctx, "nvl72", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, generation, cd.GetGeneration(), "the ComputeDomain's spec was never written")
	// The stand-in CRD keeps NVIDIA's rule: the spec is immutable.
	_, err = cds.Patch(ctx, "nvl72", types.MergePatchType, []byte(`{"spec":{"numNodes":2}}`), metav1.PatchOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsInvalid(err), "%v", err)
	assert.Contains(t, err.Error(), "immutable")
}

// A worker pod given the channel claim by computedomain.AddChannelClaim is what the real API
// server accepts, and what Kubernetes' DRA claim controller acts on: with the channel's
// ResourceClaimTemplate in place (NVIDIA's driver makes it; here the test does), the pod
// gets its own ResourceClaim from it.
func TestComputeDomainChannelClaimPod(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	// Never scheduled: no scheduler has this name (no NVIDIA driver would allocate it).
	p := newPod(ns, "worker")
	p.Spec.SchedulerName = "kubeslurm-e2e-unscheduled"
	require.NoError(t, computedomain.AddChannelClaim(&p.Spec, "nvl72-channel"))
	got, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Len(t, got.Spec.ResourceClaims, 1)
	assert.Equal(t, computedomain.ChannelClaimName, got.Spec.ResourceClaims[0].Name)
	assert.Equal(t, "nvl72-channel", *got.Spec.ResourceClaims[0].ResourceClaimTemplateName)
	for _, ctr := range got.Spec.Containers {
		assert.Equal(t, []v1.ResourceClaim{{Name: computedomain.ChannelClaimName}}, ctr.Resources.Claims, ctr.Name)
	}

	_, err = kube.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "nvl72-channel"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "compute-domain-default-channel.nvidia.com"}}},
		}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	var claim string
	eventually(t, 60*time.Second, "the pod's channel ResourceClaim made from the template", func() bool {
		for _, s := range getPod(t, ns, "worker").Status.ResourceClaimStatuses {
			if s.Name == computedomain.ChannelClaimName && s.ResourceClaimName != nil {
				claim = *s.ResourceClaimName
				return true
			}
		}
		return false
	})
	rc, err := kube.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "compute-domain-default-channel.nvidia.com", rc.Spec.Devices.Requests[0].Exactly.DeviceClassName)
	assert.True(t, metav1.IsControlledBy(rc, got), "the claim belongs to the pod")
}

// Without the ComputeDomain CRD (no NVIDIA driver) a SlurmCluster asking for a domain says
// so in a condition and an event, and the rest of it reconciles; once the CRD is there, the
// ComputeDomain is created. The CRD is restored at the end in any case.
func TestComputeDomainCRDAbsent(t *testing.T) {
	ctx := context.Background()
	crds := dynamic.NewForConfigOrDie(adminConfig).Resource(crdGVR)
	crdGone := func() bool {
		_, err := crds.Get(ctx, computeDomainCRD, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	restore := func() {
		eventually(t, 60*time.Second, "the ComputeDomain CRD deleted, before it is applied again", crdGone)
		nodeKubectl(t, "apply", "-f", filepath.Join(repoRoot, "manifests", "local", "computedomain-crd.yaml"))
		nodeKubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/"+computeDomainCRD)
	}
	t.Cleanup(func() {
		if crdGone() || !crdStable(t, crds) {
			restore()
		}
	})
	require.NoError(t, crds.Delete(ctx, computeDomainCRD, metav1.DeleteOptions{}))
	eventually(t, 60*time.Second, "the ComputeDomain CRD deleted", crdGone)

	ns := namespace(t)
	kc := slurmClient(t)
	c := &slurmv1.SlurmCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slurm"},
		Spec:       slurmv1.SlurmClusterSpec{ComputeDomain: &slurmv1.ComputeDomainSpec{Enabled: true}},
	}
	require.NoError(t, kc.Create(ctx, c))
	var cond metav1.Condition
	eventually(t, 30*time.Second, "ComputeDomainReady False: ComputeDomainCRDMissing", func() bool {
		c, cond = slurmClusterStatus(t, kc, ns, "slurm")
		return cond.Reason == slurmcluster.ReasonComputeDomainCRDMissing
	})
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Contains(t, cond.Message, "computedomains.resource.nvidia.com")
	assert.Nil(t, c.Status.ComputeDomain)
	// The rest of the SlurmCluster reconciles.
	assert.True(t, meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionConfigValid))
	assert.True(t, meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionKeysReady))
	cm := &v1.ConfigMap{}
	require.NoError(t, kc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "slurm-slurm-config"}, cm))
	assert.Contains(t, cm.Data["slurm.conf"], "SwitchType=switch/nvidia_imex")
	eventually(t, 30*time.Second, "a ComputeDomainCRDMissing event", func() bool {
		return strings.Contains(clusterEvents(t, ns, wellknown.EventComputeDomainCRDMissing), "NVIDIA's DRA driver")
	})

	// The CRD is installed: within a poll the ComputeDomain is there.
	restore()
	eventually(t, 40*time.Second, "ComputeDomain created once the CRD is back", func() bool {
		_, err := computeDomains(t, ns).Get(ctx, "slurm-compute-domain", metav1.GetOptions{})
		return err == nil
	})
	eventually(t, 30*time.Second, "ComputeDomainReady: waiting for NVIDIA's driver", func() bool {
		_, cond = slurmClusterStatus(t, kc, ns, "slurm")
		return cond.Reason == slurmcluster.ReasonComputeDomainNotReady
	})
}

// crdStable says whether the CRD exists and is not being deleted.
func crdStable(t *testing.T, crds dynamic.NamespaceableResourceInterface) bool {
	t.Helper()
	crd, err := crds.Get(context.Background(), computeDomainCRD, metav1.GetOptions{})
	return err == nil && crd.GetDeletionTimestamp() == nil
}

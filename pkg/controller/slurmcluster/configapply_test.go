package slurmcluster

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// slurmctld's log when a plugin named in slurm.conf does not exist (Slurm 26.05.5, seen by
// hand: slurmctld -D with SchedulerType=sched/nonexistent).
const schedRejectedLog = `[2026-12-03T13:25:43.426] error: Configured MailProg is invalid
[2026-12-03T13:25:43.434] error: cannot create sched context for sched/nonexistent
[2026-12-03T13:25:43.434] error: failed to initialize sched plugin
[2026-12-03T13:25:43.434] fatal: Failed to initialize the various schedulers
`

// controllerPodOn makes slurmctld's pod on configuration hash as the StatefulSet would (the
// old one goes), with the given container status; ready sets its Ready condition.
func (f *fixture) controllerPodOn(hash string, ready bool, cs v1.ContainerStatus) {
	f.t.Helper()
	ctx := context.Background()
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "slurm-controller-0",
		Labels:      componentLabels(f.cluster(), componentSlurmctld),
		Annotations: map[string]string{wellknown.SlurmConfigHashAnnotation: hash}}}
	_ = f.kube.Delete(ctx, p)
	require.NoError(f.t, f.kube.Create(ctx, p))
	cs.Name = componentSlurmctld
	p.Status.ContainerStatuses = []v1.ContainerStatus{cs}
	f.setReady(p, ready)
}

func (f *fixture) controllerPodExists() bool {
	err := f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-controller-0"}, &v1.Pod{})
	require.True(f.t, err == nil || apierrors.IsNotFound(err), "%v", err)
	return err == nil
}

// applyFirstConfig reconciles a new cluster until slurmctld's pod runs its configuration
// ready, and returns that configuration's hash.
func (f *fixture) applyFirstConfig() string {
	f.reconcile()
	hash := f.cluster().Status.ConfigHash
	f.controllerPodOn(hash, true, runningCS)
	f.reconcile()
	return hash
}

func (f *fixture) keptConfigMap() *v1.ConfigMap {
	cm := &v1.ConfigMap{}
	require.NoError(f.t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-slurm-config-applied"}, cm))
	return cm
}

// The StatefulSet's configuration: its hash and the ConfigMap its pod mounts.
func stsConfig(sts *appsv1.StatefulSet) (string, string) {
	return sts.Spec.Template.Annotations[wellknown.SlurmConfigHashAnnotation],
		sts.Spec.Template.Spec.Volumes[0].Projected.Sources[0].ConfigMap.Name
}

var (
	runningCS = v1.ContainerStatus{State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
	// Exited once: not yet a rejection (the kubelet retries it after 10 s).
	exitedOnceCS = v1.ContainerStatus{State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, Message: schedRejectedLog}}}
	// Exited again after a restart, waiting in back-off.
	crashLoopCS = v1.ContainerStatus{RestartCount: 1,
		State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, Message: schedRejectedLog}}}
)

// A configuration slurmctld refuses: recorded as rejected, slurmctld (and slurmrestd) put
// back on the last applied one, with a condition saying why and one warning; the rejected
// hash is not retried while the spec renders to it; a fixed spec is applied.
func TestConfigRejectedBySlurmctld(t *testing.T) {
	c := newCluster()
	c.Spec.RestAPI = &slurmv1.RestAPISpec{}
	f := newFixture(t, c)
	good := f.applyFirstConfig()
	c = f.cluster()
	require.Equal(t, good, c.Status.AppliedConfigHash)
	// The applied configuration is kept: the rendered ConfigMap's files, owned by the cluster.
	kept := f.keptConfigMap()
	assert.Equal(t, good, kept.Annotations[wellknown.SlurmConfigHashAnnotation])
	assert.Equal(t, f.configMap().Data, kept.Data)
	assert.True(t, metav1.IsControlledBy(kept, c))

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "SchedulerType=sched/nonexistent" })
	f.reconcile()
	bad := f.cluster().Status.ConfigHash
	require.NotEqual(t, good, bad)
	h, cm := stsConfig(f.statefulSet())
	assert.Equal(t, []string{bad, "slurm-slurm-config"}, []string{h, cm}, "slurmctld tries the new configuration")

	// One exit is not yet a rejection.
	f.controllerPodOn(bad, false, exitedOnceCS)
	f.events()
	f.reconcile()
	assert.Empty(t, f.cluster().Status.RejectedConfigHash)
	assert.True(t, f.controllerPodExists())

	// It exits again after its restart: rejected, back on the kept configuration.
	f.controllerPodOn(bad, false, crashLoopCS)
	f.reconcile()
	c = f.cluster()
	assert.Equal(t, bad, c.Status.RejectedConfigHash)
	assert.Equal(t, good, c.Status.AppliedConfigHash)
	assert.Equal(t, bad, c.Status.ConfigHash, "the ConfigMap keeps the spec's rendering")
	cond := condition(c, slurmv1.ConditionConfigApplied)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, ReasonRejectedBySlurmctld, cond.Reason)
	want := "slurmctld refused configuration " + bad + ": exit code 1: error: cannot create sched context for sched/nonexistent; " +
		"error: failed to initialize sched plugin; fatal: Failed to initialize the various schedulers; it runs configuration " + good + " again until the spec changes"
	assert.Equal(t, want, cond.Message)
	assert.Equal(t, []string{"Warning SlurmConfigRejected " + want}, f.events())
	h, cm = stsConfig(f.statefulSet())
	assert.Equal(t, []string{good, "slurm-slurm-config-applied"}, []string{h, cm}, "slurmctld runs the kept configuration")
	d := &appsv1.Deployment{}
	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: RestAPIName(c)}, d))
	assert.Equal(t, good, d.Spec.Template.Annotations[wellknown.SlurmConfigHashAnnotation], "slurmrestd reads the slurm.conf slurmctld runs")
	assert.Equal(t, "slurm-slurm-config-applied", d.Spec.Template.Spec.Volumes[0].ConfigMap.Name)
	// The StatefulSet would not replace a pod that is not ready: the controller deletes it.
	assert.False(t, f.controllerPodExists())

	// No flapping: the rejected hash is not tried again, with the old pod back or not.
	rv := f.statefulSet().ResourceVersion
	f.reconcile()
	f.controllerPodOn(good, true, runningCS)
	f.reconcile()
	c = f.cluster()
	assert.Equal(t, rv, f.statefulSet().ResourceVersion)
	assert.Equal(t, bad, c.Status.RejectedConfigHash)
	assert.Equal(t, good, c.Status.AppliedConfigHash)
	assert.Equal(t, want, condition(c, slurmv1.ConditionConfigApplied).Message)
	assert.Empty(t, f.events())
	assert.True(t, f.controllerPodExists(), "the pod on the kept configuration stays")

	// A spec change that keeps the rendering (no new hash) keeps it rejected.
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.LoginSets = nil })
	f.reconcile()
	c = f.cluster()
	assert.Equal(t, bad, c.Status.RejectedConfigHash)
	assert.Equal(t, c.Generation, condition(c, slurmv1.ConditionConfigApplied).ObservedGeneration)

	// A fixed spec renders to a new hash: slurmctld runs it, and it is kept.
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "SchedulerType=sched/builtin" })
	f.reconcile()
	fixed := f.cluster().Status.ConfigHash
	h, cm = stsConfig(f.statefulSet())
	assert.Equal(t, []string{fixed, "slurm-slurm-config"}, []string{h, cm})
	f.controllerPodOn(fixed, true, runningCS)
	f.events()
	f.reconcile()
	c = f.cluster()
	assert.Empty(t, c.Status.RejectedConfigHash)
	assert.Equal(t, fixed, c.Status.AppliedConfigHash)
	assert.Equal(t, metav1.ConditionTrue, condition(c, slurmv1.ConditionConfigApplied).Status)
	assert.Equal(t, fixed, f.keptConfigMap().Annotations[wellknown.SlurmConfigHashAnnotation])
	assert.Equal(t, []string{"Normal SlurmConfigApplied slurmctld pod slurm-controller-0 runs configuration " + fixed + ` (was "` + good + `")`}, f.events())
}

// The status write that records a rejection can be lost (a conflict) after the StatefulSet
// went back to the kept configuration: the rejection is read back from the StatefulSet,
// and slurmctld is not sent to the refused configuration again.
func TestRejectionSurvivesALostStatusWrite(t *testing.T) {
	f := newFixture(t, newCluster())
	good := f.applyFirstConfig()
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "SchedulerType=sched/nonexistent" })
	f.reconcile()
	before := f.cluster().Status
	bad := before.ConfigHash
	f.controllerPodOn(bad, false, crashLoopCS)
	f.reconcile()
	require.Equal(t, bad, f.cluster().Status.RejectedConfigHash)
	assert.Equal(t, bad, f.statefulSet().Annotations[wellknown.SlurmRejectedConfigHashAnnotation])

	// The status as it was before the rejection; the pod on the kept configuration is up.
	c := f.cluster()
	c.Status = before
	require.NoError(t, f.kube.Status().Update(context.Background(), c))
	f.controllerPodOn(good, true, runningCS)
	rv := f.statefulSet().ResourceVersion
	f.reconcile()
	h, cm := stsConfig(f.statefulSet())
	assert.Equal(t, []string{good, "slurm-slurm-config-applied"}, []string{h, cm}, "slurmctld stays on the kept configuration")
	assert.Equal(t, rv, f.statefulSet().ResourceVersion)
	c = f.cluster()
	assert.Equal(t, bad, c.Status.RejectedConfigHash)
	assert.Equal(t, ReasonRejectedBySlurmctld, condition(c, slurmv1.ConditionConfigApplied).Reason)
	assert.True(t, f.controllerPodExists())

	// A fixed spec is applied, and the StatefulSet no longer names a rejected configuration.
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "" })
	f.reconcile()
	f.controllerPodOn(good, true, runningCS)
	f.reconcile()
	f.reconcile()
	assert.Empty(t, f.cluster().Status.RejectedConfigHash)
	assert.NotContains(t, f.statefulSet().Annotations, wellknown.SlurmRejectedConfigHashAnnotation)
}

// The first configuration rejected: nothing to return to. It is recorded and said; a fixed
// spec replaces the failing pod (the StatefulSet would not).
func TestFirstConfigRejectedBySlurmctld(t *testing.T) {
	c := newCluster()
	c.Spec.ExtraConfig = "SchedulerType=sched/nonexistent"
	f := newFixture(t, c)
	f.reconcile()
	bad := f.cluster().Status.ConfigHash
	f.controllerPodOn(bad, false, crashLoopCS)
	f.reconcile()
	c = f.cluster()
	assert.Equal(t, bad, c.Status.RejectedConfigHash)
	cond := condition(c, slurmv1.ConditionConfigApplied)
	assert.Equal(t, ReasonRejectedBySlurmctld, cond.Reason)
	assert.Contains(t, cond.Message, "there is no applied configuration to return to")
	h, _ := stsConfig(f.statefulSet())
	assert.Equal(t, bad, h)
	assert.True(t, f.controllerPodExists(), "no other configuration to run: the pod stays")

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "" })
	f.reconcile()
	h, _ = stsConfig(f.statefulSet())
	assert.Equal(t, f.cluster().Status.ConfigHash, h)
	assert.False(t, f.controllerPodExists(), "the pod failing on the old configuration is replaced")
}

// The configuration slurmctld ran before is never rejected: its pod failing later is
// something else (ControllerReady says so).
func TestAppliedConfigNotRejected(t *testing.T) {
	f := newFixture(t, newCluster())
	good := f.applyFirstConfig()
	f.controllerPodOn(good, false, crashLoopCS)
	f.reconcile()
	assert.Empty(t, f.cluster().Status.RejectedConfigHash)
	assert.True(t, f.controllerPodExists())
}

func TestSlurmctldFailed(t *testing.T) {
	term := func(code int32, msg string) *v1.ContainerStateTerminated {
		return &v1.ContainerStateTerminated{ExitCode: code, Message: msg}
	}
	for _, tc := range []struct {
		name   string
		ready  bool
		cs     v1.ContainerStatus
		failed bool
		why    string
	}{
		{name: "running", cs: runningCS},
		{name: "exited once", cs: exitedOnceCS},
		{name: "crash loop", cs: crashLoopCS, failed: true,
			why: "exit code 1: error: cannot create sched context for sched/nonexistent; error: failed to initialize sched plugin; fatal: Failed to initialize the various schedulers"},
		{name: "terminated after a restart", failed: true, why: "exit code 1: error: _parse_next_key: Parsing error at unrecognized key: NoSuchKey; fatal: Unable to process configuration file",
			cs: v1.ContainerStatus{RestartCount: 2, State: v1.ContainerState{Terminated: term(1, "[t] error: _parse_next_key: Parsing error at unrecognized key: NoSuchKey\n[t] fatal: Unable to process configuration file\n")}}},
		{name: "running again after an exit", cs: v1.ContainerStatus{RestartCount: 1,
			State: runningCS.State, LastTerminationState: crashLoopCS.LastTerminationState}},
		{name: "exit code 0", cs: v1.ContainerStatus{RestartCount: 1, LastTerminationState: v1.ContainerState{Terminated: term(0, "")}}},
		{name: "no message", failed: true, why: "exit code 137",
			cs: v1.ContainerStatus{RestartCount: 1, LastTerminationState: v1.ContainerState{Terminated: term(137, "")}}},
		{name: "ready", ready: true, cs: crashLoopCS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cs.Name = componentSlurmctld
			p := &v1.Pod{Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{tc.cs}}}
			if tc.ready {
				p.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}
			}
			failed, why := slurmctldFailed(p)
			assert.Equal(t, tc.failed, failed)
			assert.Equal(t, tc.why, why)
		})
	}
}

func TestFailureLines(t *testing.T) {
	long := make([]byte, 600)
	for i := range long {
		long[i] = 'x'
	}
	for _, tc := range []struct{ log, want string }{
		{"", ""},
		{"\n\n", ""},
		{"only line\n", "only line"},
		{"slurmctld: error: a\nslurmctld: fatal: b\n", "error: a; fatal: b"},
		// The last fatal line, after it nothing.
		{"[t] fatal: b\n[t] Saving all slurm state\n", "fatal: b"},
		// No fatal line: the last line, with the errors before it.
		{"[t] error: a\n[t] error: b\n", "error: a; error: b"},
		{"[t] started\n[t] Terminated\n", "Terminated"},
		{"[t] error: one\n[t] error: two\n[t] error: three\n[t] fatal: f\n", "error: two; error: three; fatal: f"},
		{"fatal: " + string(long), "fatal: " + string(long[:failureMessageMax-len("fatal: ")]) + "..."},
	} {
		assert.Equal(t, tc.want, failureLines(tc.log), "%q", tc.log)
	}
}

func TestControllerPodCluster(t *testing.T) {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "slurm-controller-0", Labels: componentLabels(newCluster(), componentSlurmctld)}}
	reqs := controllerPodCluster(context.Background(), p)
	require.Len(t, reqs, 1)
	assert.Equal(t, client.ObjectKey{Namespace: "hpc", Name: "slurm"}, reqs[0].NamespacedName)
	p.Labels[wellknown.SlurmComponentLabel] = "slurmd"
	assert.Empty(t, controllerPodCluster(context.Background(), p), "workers are the cluster's own pods, watched as such")
}

// slurmctld exiting on something other than a new configuration (here a key set it
// refuses, on the configuration it ran before): ControllerReady says why, from its log,
// and the configuration is not taken for rejected.
func TestControllerNotReadySaysWhy(t *testing.T) {
	f := newFixture(t, newCluster())
	good := f.applyFirstConfig()
	require.Equal(t, good, f.cluster().Status.AppliedConfigHash)

	keysRefused := v1.ContainerStatus{RestartCount: 2,
		State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1,
			Message: "[2026-12-04T18:21:15.462] Reconfigure signal (SIGHUP) received\n[2026-12-04T18:21:15.480] fatal: _build_key_list: kid fields must be unique\n"}}}
	f.controllerPodOn(good, false, keysRefused)
	f.reconcile()
	c := f.cluster()
	cond := condition(c, slurmv1.ConditionControllerReady)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, "slurmctld pod slurm-controller-0 is not ready: exit code 1: fatal: _build_key_list: kid fields must be unique", cond.Message)
	assert.Empty(t, c.Status.RejectedConfigHash, "the configuration ran before: not rejected")
	assert.True(t, f.controllerPodExists(), "its pod stays: the StatefulSet restarts it on the same configuration")
}

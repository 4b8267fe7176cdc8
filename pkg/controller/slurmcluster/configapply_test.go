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
// hand: slurmctld -D with SchedulerType=sched/nonexistent); the script reports the same
// lines (its grep keeps the error and fatal ones).
const schedRejectedLines = `[2026-12-03T13:25:43.426] error: Configured MailProg is invalid
[2026-12-03T13:25:43.434] error: cannot create sched context for sched/nonexistent
[2026-12-03T13:25:43.434] error: failed to initialize sched plugin
[2026-12-03T13:25:43.434] fatal: Failed to initialize the various schedulers
`

// controllerPodOn makes slurmctld's pod, whose script says slurmctld runs configuration
// hash, with the given container status; ready sets its Ready condition.
func (f *fixture) controllerPodOn(hash string, ready bool, cs v1.ContainerStatus) {
	f.t.Helper()
	f.controllerPodSays(map[string]string{wellknown.SlurmctldConfigAnnotation: hash}, ready, cs)
}

// controllerPodSays makes slurmctld's pod with annotations (its script's), keeping the
// pod if it exists (a new configuration does not replace it).
func (f *fixture) controllerPodSays(annotations map[string]string, ready bool, cs v1.ContainerStatus) {
	f.t.Helper()
	ctx := context.Background()
	p := &v1.Pod{}
	err := f.kube.Get(ctx, client.ObjectKey{Namespace: "hpc", Name: "slurm-controller-0"}, p)
	if apierrors.IsNotFound(err) {
		p = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "slurm-controller-0",
			Labels: componentLabels(f.cluster(), componentSlurmctld), Annotations: annotations}}
		require.NoError(f.t, f.kube.Create(ctx, p))
	} else {
		require.NoError(f.t, err)
		p.Annotations = annotations
		require.NoError(f.t, f.kube.Update(ctx, p))
	}
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

var (
	runningCS = v1.ContainerStatus{State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
	// Exited once: the kubelet starts it again after 10 s.
	exitedOnceCS = v1.ContainerStatus{State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, Message: schedRejectedLines}}}
	// Exited again after a restart, waiting in back-off.
	crashLoopCS = v1.ContainerStatus{RestartCount: 1,
		State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, Message: schedRejectedLines}}}
)

// A configuration slurmctld refuses in place: its pod stays as it is (the StatefulSet is
// not touched by configurations), slurmctld runs on the applied one, and the refusal its
// script reports sets the condition with slurmctld's own lines and one warning; slurmrestd
// reads the applied one meanwhile; the rejection is read again from the pod should the
// status lose it; a fixed spec is applied in place too.
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
	assert.Equal(t, good, kept.Data[ConfigHashFile], "the script reads the hash from the files")
	assert.True(t, metav1.IsControlledBy(kept, c))
	sts := f.statefulSet().ResourceVersion

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "SchedulerType=sched/nonexistent" })
	f.events()
	f.reconcile()
	bad := f.cluster().Status.ConfigHash
	require.NotEqual(t, good, bad)
	assert.Equal(t, sts, f.statefulSet().ResourceVersion, "a new configuration leaves the StatefulSet as it is")
	cond := condition(f.cluster(), slurmv1.ConditionConfigApplied)
	assert.Equal(t, "slurmctld runs configuration "+good+"; it is told to read "+bad, cond.Message)

	// Its script tried it, and slurmctld refused it: rejected, slurmctld runs on.
	refusal := map[string]string{wellknown.SlurmctldConfigAnnotation: good,
		wellknown.SlurmctldRefusedConfigAnnotation: bad, wellknown.SlurmctldRefusedReasonAnnotation: schedRejectedLines}
	f.controllerPodSays(refusal, true, runningCS)
	f.events()
	f.reconcile()
	c = f.cluster()
	assert.Equal(t, bad, c.Status.RejectedConfigHash)
	assert.Equal(t, good, c.Status.AppliedConfigHash)
	assert.Equal(t, bad, c.Status.ConfigHash, "the ConfigMap keeps the spec's rendering")
	cond = condition(c, slurmv1.ConditionConfigApplied)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, ReasonRejectedBySlurmctld, cond.Reason)
	want := "slurmctld refused configuration " + bad + ": error: cannot create sched context for sched/nonexistent; " +
		"error: failed to initialize sched plugin; fatal: Failed to initialize the various schedulers; it runs configuration " + good + " until the spec changes"
	assert.Equal(t, want, cond.Message)
	assert.Equal(t, []string{"Warning SlurmConfigRejected " + want}, f.events())
	assert.Equal(t, sts, f.statefulSet().ResourceVersion)
	assert.Equal(t, good, f.keptConfigMap().Data[ConfigHashFile], "the kept configuration is the one slurmctld runs")
	d := &appsv1.Deployment{}
	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: RestAPIName(c)}, d))
	assert.Equal(t, good, d.Spec.Template.Annotations[wellknown.SlurmConfigHashAnnotation], "slurmrestd reads the slurm.conf slurmctld runs")
	assert.Equal(t, "slurm-slurm-config-applied", d.Spec.Template.Spec.Volumes[0].ConfigMap.Name)

	// No flapping, and one event only.
	f.reconcile()
	assert.Equal(t, want, condition(f.cluster(), slurmv1.ConditionConfigApplied).Message)
	assert.Empty(t, f.events())

	// A lost status write: the rejection is on the pod, and read again.
	c = f.cluster()
	c.Status.RejectedConfigHash = ""
	require.NoError(t, f.kube.Status().Update(context.Background(), c))
	f.reconcile()
	assert.Equal(t, bad, f.cluster().Status.RejectedConfigHash)
	f.events()

	// A spec change that keeps the rendering (no new hash) keeps it rejected.
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.LoginSets = nil })
	f.reconcile()
	c = f.cluster()
	assert.Equal(t, bad, c.Status.RejectedConfigHash)
	assert.Equal(t, c.Generation, condition(c, slurmv1.ConditionConfigApplied).ObservedGeneration)

	// A fixed spec renders to a new hash: slurmctld is told to read it, runs it, and it is kept.
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "SchedulerType=sched/builtin" })
	f.reconcile()
	fixed := f.cluster().Status.ConfigHash
	assert.Equal(t, ReasonControllerWaiting, condition(f.cluster(), slurmv1.ConditionConfigApplied).Reason)
	refusal[wellknown.SlurmctldConfigAnnotation] = fixed
	f.controllerPodSays(refusal, true, runningCS)
	f.events()
	f.reconcile()
	c = f.cluster()
	assert.Empty(t, c.Status.RejectedConfigHash)
	assert.Equal(t, fixed, c.Status.AppliedConfigHash)
	assert.NotNil(t, c.Status.LastReconfigureTime)
	assert.Equal(t, metav1.ConditionTrue, condition(c, slurmv1.ConditionConfigApplied).Status)
	assert.Equal(t, fixed, f.keptConfigMap().Annotations[wellknown.SlurmConfigHashAnnotation])
	assert.Equal(t, []string{"Normal SlurmConfigApplied slurmctld (pod slurm-controller-0) runs configuration " + fixed + ` (was "` + good + `")`}, f.events())
	assert.Equal(t, sts, f.statefulSet().ResourceVersion)
}

// The first configuration rejected: nothing to return to, slurmctld's pod fails. It is
// recorded and said, and the pod is left to the kubelet: the next configuration reaches
// its files, and slurmctld starts on it.
func TestFirstConfigRejectedBySlurmctld(t *testing.T) {
	c := newCluster()
	c.Spec.ExtraConfig = "SchedulerType=sched/nonexistent"
	f := newFixture(t, c)
	f.reconcile()
	bad := f.cluster().Status.ConfigHash
	f.controllerPodSays(map[string]string{wellknown.SlurmctldConfigAnnotation: "",
		wellknown.SlurmctldRefusedConfigAnnotation: bad, wellknown.SlurmctldRefusedReasonAnnotation: schedRejectedLines}, false, crashLoopCS)
	f.reconcile()
	c = f.cluster()
	assert.Equal(t, bad, c.Status.RejectedConfigHash)
	cond := condition(c, slurmv1.ConditionConfigApplied)
	assert.Equal(t, ReasonRejectedBySlurmctld, cond.Reason)
	assert.Contains(t, cond.Message, "fatal: Failed to initialize the various schedulers; it is not running: it starts on the spec's next configuration at once, and tries this one again every minute")
	assert.True(t, f.controllerPodExists())

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "" })
	f.reconcile()
	fixed := f.cluster().Status.ConfigHash
	assert.Equal(t, ReasonControllerWaiting, condition(f.cluster(), slurmv1.ConditionConfigApplied).Reason)
	f.controllerPodOn(fixed, true, runningCS)
	f.reconcile()
	assert.Equal(t, fixed, f.cluster().Status.AppliedConfigHash)
	assert.Empty(t, f.cluster().Status.RejectedConfigHash)
}

// What slurmctld's pod says counts only while it is ready, and a refusal of the
// configuration slurmctld already runs is stale: neither is taken.
func TestStaleOutcomesAreNotTaken(t *testing.T) {
	f := newFixture(t, newCluster())
	good := f.applyFirstConfig()
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "SchedulerType=sched/builtin" })
	f.reconcile()
	next := f.cluster().Status.ConfigHash
	f.controllerPodOn(next, false, crashLoopCS)
	f.reconcile()
	c := f.cluster()
	assert.Equal(t, good, c.Status.AppliedConfigHash, "not ready: not applied")
	assert.Equal(t, "slurmctld pod slurm-controller-0 is not ready; it will run configuration "+next,
		condition(c, slurmv1.ConditionConfigApplied).Message)

	// Ready, but its script has not reported yet (a new pod).
	f.controllerPodSays(nil, true, runningCS)
	f.reconcile()
	assert.Contains(t, condition(f.cluster(), slurmv1.ConditionConfigApplied).Message, "has not said which configuration slurmctld runs yet")
	assert.Equal(t, good, f.cluster().Status.AppliedConfigHash)

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "" })
	f.reconcile()
	require.Equal(t, good, f.cluster().Status.ConfigHash)
	f.controllerPodSays(map[string]string{wellknown.SlurmctldConfigAnnotation: good, wellknown.SlurmctldRefusedConfigAnnotation: good}, true, runningCS)
	f.reconcile()
	c = f.cluster()
	assert.Empty(t, c.Status.RejectedConfigHash)
	assert.Equal(t, metav1.ConditionTrue, condition(c, slurmv1.ConditionConfigApplied).Status)
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

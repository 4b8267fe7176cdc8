package plugin

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
	"github.com/kubeslurm/kubeslurm/pkg/workload"
)

// The kinds a dependency may name are spelt in slurmjob (which pkg/workload imports).
func TestDependencyKindsAreWorkloadKinds(t *testing.T) {
	assert.ElementsMatch(t, []string{slurmjob.RefKindPod, workload.KindJob, workload.KindPodGroup,
		workload.KindSchedulingPodGroup, workload.KindJobSet, workload.KindLeaderWorkerSet}, slurmjob.RefKinds)
}

func deps(t *testing.T, v string) []slurmjob.Dependency {
	t.Helper()
	d, err := slurmjob.ParseDependency(v)
	require.NoError(t, err)
	return d
}

func TestResolveDependencies(t *testing.T) {
	f, _, _, _ := submittedTrio(t) // PodGroup default/train has job 1
	single := newPod("setup", nil)
	f.addPods(single)
	_, _ = f.cycle(single, nil) // job 2, for the pod alone
	f.poll()

	got, err := resolveDependencies(deps(t, "afterany:PodGroup/train:77,after:Pod/setup:PodGroup/train"), "default", f.watcher)
	require.NoError(t, err)
	assert.Equal(t, []slurmjob.Dependency{
		{Type: "afterany", JobIDs: []int32{77, 1}},
		{Type: "after", JobIDs: []int32{2, 1}},
	}, got)

	// Same name, other namespace: that workload has no job.
	_, err = resolveDependencies(deps(t, "afterany:PodGroup/train"), "other", f.watcher)
	require.ErrorIs(t, err, errNoJobYet)
	assert.EqualError(t, err, "PodGroup train has no Slurm job yet")
	_, err = resolveDependencies(deps(t, "afterany:Job/train-a"), "default", f.watcher)
	assert.EqualError(t, err, "Job train-a has no Slurm job yet")
	_, err = resolveDependencies(deps(t, "afterany:LeaderWorkerSet/serve/0"), "default", f.watcher)
	assert.EqualError(t, err, "LeaderWorkerSet serve/0 has no Slurm job yet")

	// afterok on a placeholder job's id can never hold; on any other job it passes through.
	_, err = resolveDependencies(deps(t, "afterok:2"), "default", f.watcher)
	require.Error(t, err)
	assert.NotErrorIs(t, err, errNoJobYet)
	assert.Contains(t, err.Error(), "placeholder job of pod default/setup")
	got, err = resolveDependencies(deps(t, "afterok:500:501"), "default", f.watcher)
	require.NoError(t, err)
	assert.Equal(t, []slurmjob.Dependency{{Type: "afterok", JobIDs: []int32{500, 501}}}, got)
}

func TestDependencyOnWorkloadWithoutJobWaits(t *testing.T) {
	pod := newPod("p", map[string]string{slurmjob.Annotation("dependency"): "afterany:Job/prep"})
	f := newFixture(t, pod)
	f.poll()

	_, st := f.cycle(pod, nil)
	assert.Equal(t, fwk.Unschedulable, st.Code(), "waits, and is retried")
	assert.Contains(t, st.Message(), "Job prep has no Slurm job yet")
	assert.Zero(t, f.slurm.Requests()["create"])
	assert.Empty(t, f.events(), "waiting is not an event")
}

func TestDependencyOnGroupIsSubmittedAsItsJobID(t *testing.T) {
	f, _, _, _ := submittedTrio(t)
	pod := newPod("eval", map[string]string{slurmjob.Annotation("dependency"): "afterany:PodGroup/train:9"})
	f.addPods(pod)
	f.poll()

	_, st := f.cycle(pod, nil)
	require.Equal(t, fwk.Unschedulable, st.Code(), st.Message())
	assert.Contains(t, st.Message(), "Slurm job 2 submitted")
	assert.Equal(t, "afterany:9:1", *f.slurm.LastSubmit.Dependency)
}

func TestAfterOKOnPlaceholderJobIsInvalid(t *testing.T) {
	f, _, _, _ := submittedTrio(t)
	pod := newPod("eval", map[string]string{slurmjob.Annotation("dependency"): "afterok:1"})
	f.addPods(pod)
	f.poll()
	f.events()
	f.slurm.Requests()

	_, st := f.cycle(pod, nil)
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code())
	assert.Contains(t, st.Message(), slurmjob.Annotation("dependency"))
	assert.Zero(t, f.slurm.Requests()["create"])
	ev := strings.Join(f.events(), "\n")
	assert.Contains(t, ev, wellknown.EventInvalidSlurmJobSpec)
	assert.Contains(t, ev, "never records as completed")
}

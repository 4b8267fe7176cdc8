package e2e

// The slurmjob annotations, ours and slurm-bridge's aliases, as Slurm itself shows them.
//
// The local cluster has no slurmdbd and no AccountingStorageType (nor has the SlurmCluster
// of TestSlurmClusterWorkersOnKwokNodes, which runs these scenarios too): Slurm then takes any
// account and QOS name without checking it (scontrol shows the QOS only while the job is
// pending), and stores a wckey (squeue shows it, scontrol does not here), so all three are
// checked. Neither has a reservation, Licenses or a GRES type but gpu: a job asking for
// another is refused, so those reach Slurm only as far as Slurm's own refusal
// (TestAnnotationGRESAndLicensesReachSlurm), and no reservation is made (one would take a
// node from the other tests). The tests give one node a feature for their duration.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// jobFields is `scontrol show job` as Key=Value pairs (values here carry no spaces).
func (st stack) jobFields(t *testing.T, id int32) map[string]string {
	t.Helper()
	out := st.slurm(t, "scontrol", "show", "job", strconv.Itoa(int(id)))
	f := map[string]string{}
	for _, tok := range strings.Fields(out) {
		if k, v, ok := strings.Cut(tok, "="); ok {
			f[k] = v
		}
	}
	return f
}

// wckey is the job's wckey as squeue shows it.
func (st stack) wckey(t *testing.T, id int32) string {
	t.Helper()
	return strings.TrimSpace(st.slurm(t, "squeue", "-h", "--states=all", "-j", strconv.Itoa(int(id)), "-O", "WCKey"))
}

// withNodeFeature gives an idle Slurm node of the stack the feature (active and available)
// for the rest of the test, and returns its name.
func (st stack) withNodeFeature(t *testing.T, feature string) string {
	t.Helper()
	var node string
	eventually(t, 60*time.Second, "an idle Slurm node", func() bool {
		for _, line := range strings.Split(st.slurm(t, "sinfo", "-h", "-N", "-p", st.partition, "-o", "%N %t"), "\n") {
			if n, ok := strings.CutSuffix(line, " idle"); ok && slices.Contains(st.nodes, n) {
				node = n
				return true
			}
		}
		return false
	})
	before := map[string]string{}
	for _, tok := range strings.Fields(st.slurm(t, "scontrol", "show", "node", node)) {
		if k, v, ok := strings.Cut(tok, "="); ok && (k == "AvailableFeatures" || k == "ActiveFeatures") {
			before[k] = strings.TrimPrefix(v, "(null)")
		}
	}
	st.slurm(t, "scontrol", "update", "nodename="+node, "AvailableFeatures="+feature, "ActiveFeatures="+feature)
	t.Cleanup(func() {
		st.slurm(t, "scontrol", "update", "nodename="+node,
			"AvailableFeatures="+before["AvailableFeatures"], "ActiveFeatures="+before["ActiveFeatures"])
	})
	return node
}

// waitJobID waits until the scheduler has submitted the pod's job, and returns its id.
func waitJobID(t *testing.T, ns, name string, timeout time.Duration) int32 {
	t.Helper()
	var p *v1.Pod
	eventually(t, timeout, name+" has a Slurm job", func() bool {
		p = getPod(t, ns, name)
		return p.Labels[wellknown.JobIDLabel] != ""
	})
	return jobIDOf(t, p)
}

// annotated sets full annotation keys (either prefix).
func annotated(kv map[string]string) podOpt {
	return func(p *v1.Pod) {
		for k, v := range kv {
			p.Annotations[k] = v
		}
	}
}

// waitDependencyReason waits until Slurm gives the job's pending reason as Dependency (it
// may first show another until its scheduler has looked at the job).
func (st stack) waitDependencyReason(t *testing.T, id int32) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("job %d pending on its dependency", id), func() bool {
		j, ok := st.jobByID(t, id)
		return ok && j.State == "PENDING" && j.Reason == "Dependency"
	})
}

// requireJobFields checks fields of `scontrol show job`.
func (st stack) requireJobFields(t *testing.T, id int32, want map[string]string) {
	t.Helper()
	got := st.jobFields(t, id)
	for k, v := range want {
		assert.Equal(t, v, got[k], "job %d %s", id, k)
	}
}

func TestAnnotationsReachTheSlurmJob(t *testing.T) {
	annotationsReachTheSlurmJob(t, localStack(), namespace(t))
}

// annotationsReachTheSlurmJob: each of a pod's slurmjob annotations shows in its job as
// `scontrol show job` and squeue print it; the pod waits on the job its dependency names,
// then runs on the one node with the feature it asks for.
func annotationsReachTheSlurmJob(t *testing.T, st stack, ns string) {
	node := st.withNodeFeature(t, "kse2e")
	hold := st.sbatch(t, "--hold", "-J", ns+"/hold", "-o", "/dev/null", "--wrap", "sleep 600") // runs only once released
	a := func(k string) string { return slurmjob.Annotation(k) }
	// Within the partition's MaxTime (1 h on a SlurmCluster's example).
	createPod(t, ns, "every", st.pod, annotated(map[string]string{
		a("partition"): st.partition, a("account"): "physics", a("qos"): "normal", a("wckey"): "proj-e2e",
		a("time-limit"): "0:45:00", a("job-name"): ns + "/every-job", a("priority"): "1000", a("nice"): "10",
		a("constraints"): "kse2e", a("cpus-per-task"): "2", a("mem-per-node"): "512M",
		a("min-nodes"): "1", a("max-nodes"): "1", a("exclusive"): "true",
		a("user-id"): "65534", a("group-id"): "65534",
		a("dependency"): fmt.Sprintf("afterany:%d", hold),
	}))
	id := waitJobID(t, ns, "every", 60*time.Second)
	st.waitDependencyReason(t, id)
	st.requireJobFields(t, id, map[string]string{
		"JobName": ns + "/every-job", "Partition": st.partition, "Account": "physics", "QOS": "normal",
		"TimeLimit": "00:45:00", "Priority": "1000", "Nice": "10", "Features": "kse2e",
		"MinCPUsNode": "2", "MinMemoryNode": "512M", "NumNodes": "1-1", "Exclusive": "NODE",
		"UserId": "nobody(65534)", "GroupId": "nogroup(65534)",
		"Dependency": fmt.Sprintf("afterany:%d(unfulfilled)", hold),
	})
	assert.Equal(t, "proj-e2e", st.wckey(t, id))

	// The pod waits on the job it depends on, then runs where the constraint allows.
	time.Sleep(3 * time.Second)
	assert.Empty(t, getPod(t, ns, "every").Spec.NodeName, "bound while its job waits on a dependency")
	st.slurm(t, "scancel", strconv.Itoa(int(hold)))
	p := waitBound(t, ns, "every", 180*time.Second)
	assert.Equal(t, node, p.Spec.NodeName, "the only node with feature kse2e")
	assert.Equal(t, "RUNNING", st.jobFields(t, id)["JobState"])
}

func TestAnnotationAliasesGiveTheSameJob(t *testing.T) {
	ns := namespace(t)
	annotationAliasesGiveTheSameJob(t, localStack(), ns)

	// Admission reads the aliases too: a bad value, or one that contradicts ours, is refused
	// naming the key.
	_, err := kube.CoreV1().Pods(ns).Create(context.Background(), newPod(ns, "bad",
		annotated(map[string]string{slurmjob.AliasAnnotation("timelimit"): "soon"})), metav1.CreateOptions{})
	requireDenied(t, err, slurmjob.AliasAnnotation("timelimit"), "is not a time limit")
	_, err = kube.CoreV1().Pods(ns).Create(context.Background(), newPod(ns, "conflict",
		annotated(map[string]string{slurmjob.AliasAnnotation("timelimit"): "60", slurmjob.Annotation("time-limit"): "30"})), metav1.CreateOptions{})
	requireDenied(t, err, slurmjob.Annotation("time-limit"), slurmjob.AliasAnnotation("timelimit"))
}

// annotationAliasesGiveTheSameJob: a pod with slurm-bridge's annotation keys, each value in
// its own spelling, gets the same Slurm job as a pod with ours.
func annotationAliasesGiveTheSameJob(t *testing.T, st stack, ns string) {
	node := st.withNodeFeature(t, "kse2e")
	// Both jobs wait behind a job holding the one node they may use, so their fields are
	// read while pending (without accounting, scontrol shows no QOS once a job runs).
	blocker := st.sbatch(t, "-w", node, "--exclusive", "-J", ns+"/blocker", "--wrap", "sleep 600")
	st.waitJobState(t, blocker, "RUNNING")
	// slurm-bridge's keys, each with its own spelling of a value ours may write otherwise.
	// The time limit is within the partition's MaxTime (1 h on a SlurmCluster's example).
	bridge := map[string]string{
		"partition": st.partition, "account": "physics", "qos": "normal", "wckey": "proj-e2e", "timelimit": "45",
		"job-name": ns + "/same", "priority": "1000", "constraints": "kse2e", "cpu-per-task": "1500m",
		"mem-per-node": "512Mi", "min-nodes": "1", "max-nodes": "1", "exclusive": "false",
		"user-id": "65534", "group-id": "65534",
	}
	ours := map[string]string{
		"partition": st.partition, "account": "physics", "qos": "normal", "wckey": "proj-e2e", "time-limit": "0:45:00",
		"job-name": ns + "/same", "priority": "1000", "constraints": "kse2e", "cpus-per-task": "2",
		"mem-per-node": "512M", "min-nodes": "1", "max-nodes": "1", "exclusive": "false",
		"user-id": "65534", "group-id": "65534",
	}
	aliased, plain := map[string]string{}, map[string]string{}
	for k, v := range bridge {
		aliased[slurmjob.AliasAnnotation(k)] = v
	}
	for k, v := range ours {
		plain[slurmjob.Annotation(k)] = v
	}
	createPod(t, ns, "bridge", st.pod, annotated(aliased))
	createPod(t, ns, "ours", st.pod, annotated(plain))
	idBridge, idOurs := waitJobID(t, ns, "bridge", 60*time.Second), waitJobID(t, ns, "ours", 60*time.Second)

	want := map[string]string{
		"JobName": ns + "/same", "Partition": st.partition, "Account": "physics", "QOS": "normal", "TimeLimit": "00:45:00",
		"Priority": "1000", "Features": "kse2e", "MinCPUsNode": "2", "MinMemoryNode": "512M",
		"UserId": "nobody(65534)", "GroupId": "nogroup(65534)",
	}
	for _, id := range []int32{idBridge, idOurs} {
		st.waitJobState(t, id, "PENDING")
		st.requireJobFields(t, id, want)
	}
	fb, fo := st.jobFields(t, idBridge), st.jobFields(t, idOurs)
	assert.Equal(t, "NO", fb["Exclusive"], "exclusive=false")
	for _, k := range []string{"Exclusive", "OverSubscribe", "ReqTRES", "Nice", "Dependency", "Contiguous"} {
		assert.Equal(t, fo[k], fb[k], "%s of the job from slurm-bridge's keys and of ours", k)
	}
	assert.Equal(t, "proj-e2e", st.wckey(t, idBridge))
}

func TestAnnotationGRESAndLicensesReachSlurm(t *testing.T) {
	annotationGRESAndLicensesReachSlurm(t, localStack(), namespace(t))
}

// annotationGRESAndLicensesReachSlurm: the stack's Slurm has gpu GRES only and no licenses,
// so it refuses a job asking for fpga or a license, in its own words; that they are Slurm's
// gres and license errors shows where the values went.
func annotationGRESAndLicensesReachSlurm(t *testing.T, st stack, ns string) {
	cases := map[string]struct{ key, value, slurmSays string }{
		"gres":     {slurmjob.Annotation("gres"), "fpga:1", "Invalid generic resource (gres) specification"},
		"bridge":   {slurmjob.AliasAnnotation("gres"), "gres/fpga=1", "Invalid generic resource (gres) specification"},
		"licenses": {slurmjob.Annotation("licenses"), "matlab:2", "Invalid license specification"},
	}
	for name, c := range cases {
		createPod(t, ns, name, st.pod, annotated(map[string]string{c.key: c.value}))
	}
	for name, c := range cases {
		p := getPod(t, ns, name)
		eventually(t, 60*time.Second, name+": Slurm's refusal as an event", func() bool {
			return strings.Contains(podEvents(t, p), wellknown.EventSlurmJobSubmitFailed+": ") &&
				strings.Contains(podEvents(t, p), c.slurmSays)
		})
		assert.Empty(t, getPod(t, ns, name).Labels[wellknown.JobIDLabel], "no job")
	}
	assert.Empty(t, st.activeJobsNamed(t, ns+"/"))
}

func TestAnnotationDependencyOnAPodGroup(t *testing.T) {
	ns := namespace(t)
	// afterok on a workload is refused: its job ends CANCELLED, never COMPLETED.
	_, err := kube.CoreV1().Pods(ns).Create(context.Background(), newPod(ns, "never",
		withAnnotation("dependency", "afterok:PodGroup/prep")), metav1.CreateOptions{})
	requireDenied(t, err, slurmjob.Annotation("dependency"), "cannot name a workload")

	annotationDependencyOnAPodGroup(t, localStack(), ns)
}

// annotationDependencyOnAPodGroup: a pod's dependency on a PodGroup is one on the group's
// Slurm job; a pod naming a group with no job yet waits, submitting nothing, until it has one.
func annotationDependencyOnAPodGroup(t *testing.T, st stack, ns string) {
	prep := waitAllBound(t, createPodGroup(t, ns, "prep", 2, nil, st.pod), 180*time.Second)
	prepJob := jobIDOf(t, getPod(t, ns, prep[0].Name))
	createPod(t, ns, "eval", st.pod, withAnnotation("dependency", "afterany:PodGroup/prep"))
	id := waitJobID(t, ns, "eval", 60*time.Second)
	st.waitDependencyReason(t, id) // as squeue shows it
	st.requireJobFields(t, id, map[string]string{"Dependency": fmt.Sprintf("afterany:%d(unfulfilled)", prepJob)})
	time.Sleep(3 * time.Second)
	assert.Empty(t, getPod(t, ns, "eval").Spec.NodeName, "not bound while prep's job runs")

	// A pod naming a group that has no job yet waits, submitting nothing.
	createPod(t, ns, "after-late", st.pod, withAnnotation("dependency", "afterany:PodGroup/late"))
	eventually(t, 30*time.Second, "after-late waits for PodGroup late's job", func() bool {
		c := podConditionOf(getPod(t, ns, "after-late"), v1.PodScheduled)
		return c != nil && strings.Contains(c.Message, "PodGroup late has no Slurm job yet")
	})
	assert.Empty(t, getPod(t, ns, "after-late").Labels[wellknown.JobIDLabel])
	assert.NotContains(t, podEvents(t, getPod(t, ns, "after-late")), wellknown.EventInvalidSlurmJobSpec)

	// prep ends: its job is cancelled, and eval's starts.
	deleteGroupMembers(t, prep)
	waitBound(t, ns, "eval", 180*time.Second)
	assert.Equal(t, "RUNNING", st.jobFields(t, id)["JobState"])

	// late gets a job: after-late is submitted with a dependency on it (the scheduler
	// retries waiting pods at its resync, every 30 s).
	late := createPodGroup(t, ns, "late", 1, nil, st.pod)
	lateJob := waitJobID(t, ns, late[0].Name, 60*time.Second)
	afterLate := waitJobID(t, ns, "after-late", 90*time.Second)
	assert.Contains(t, st.jobFields(t, afterLate)["Dependency"], fmt.Sprintf("afterany:%d", lateJob))
}

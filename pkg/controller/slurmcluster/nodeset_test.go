package slurmcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// workers are the worker pods in the fixture's namespace, by name.
func (f *fixture) workers() map[string]*v1.Pod {
	pods := &v1.PodList{}
	require.NoError(f.t, f.kube.List(context.Background(), pods, client.InNamespace("hpc"),
		client.MatchingLabels{wellknown.SlurmComponentLabel: componentSlurmd}))
	out := map[string]*v1.Pod{}
	for i := range pods.Items {
		out[pods.Items[i].Name] = &pods.Items[i]
	}
	return out
}

// controllerUp marks slurmctld's StatefulSet ready, as the cluster would.
// controllerUp: slurmctld's StatefulSet is ready, its pod running the configuration of its
// template (as after a restart for a new one).
func (f *fixture) controllerUp() {
	sts := f.statefulSet()
	sts.Status.ReadyReplicas, sts.Status.Replicas = 1, 1
	require.NoError(f.t, f.kube.Status().Update(context.Background(), sts))
	f.controllerPodOn(f.cluster().Status.ConfigHash, true, v1.ContainerStatus{})
}

// newWorkersFixture is a cluster of one Replicas-mode NodeSet "r" whose slurmctld is up,
// reconciled until its worker pods exist.
func newWorkersFixture(t *testing.T, replicas int32) *fixture {
	c := newCluster()
	c.Spec.NodeSets = []slurmv1.NodeSetSpec{{Name: "r", Mode: slurmv1.NodeSetReplicas, Replicas: ptr(replicas)}}
	c.Spec.Partitions = nil
	f := newFixture(t, c)
	f.reconcile()
	f.controllerUp()
	f.reconcile()
	return f
}

func (f *fixture) setReady(p *v1.Pod, ready bool) {
	s := v1.ConditionFalse
	if ready {
		s = v1.ConditionTrue
	}
	p.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: s}}
	require.NoError(f.t, f.kube.Status().Update(context.Background(), p))
}

func TestWorkersFollowTheNodeSets(t *testing.T) {
	node := func(name, pool string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}}}
	}
	f := newFixture(t, newCluster(), node("n1", "cpu"), node("n2", "cpu"), node("g1", "gpu"))
	f.reconcile()
	assert.Empty(t, f.workers(), "no worker before slurmctld is ready")
	assert.Equal(t, int32(5), f.cluster().Status.DesiredWorkers, "2 matching nodes + 3 replicas")

	f.controllerUp()
	f.reconcile()
	pods := f.workers()
	require.Len(t, pods, 5)
	// DaemonSet mode: on the node, as the node's name.
	n1 := pods["slurm-cpu-n1"]
	require.NotNil(t, n1)
	assert.Equal(t, "n1", n1.Spec.NodeName)
	assert.Equal(t, []string{"-D", "-Z", "-N", "n1", "--conf-server", "slurm-controller.hpc.svc:6817", "--conf", "Features=cpu"},
		n1.Spec.Containers[0].Args)
	assert.True(t, metav1.IsControlledBy(n1, f.cluster()))
	// slurmd under the drain-on-delete wrapper, with the grace period to drain in.
	assert.Equal(t, []string{"/bin/sh", "-c", workerScript, "slurmd"}, n1.Spec.Containers[0].Command)
	assert.Equal(t, int64(DefaultDrainSeconds), *n1.Spec.TerminationGracePeriodSeconds)
	assert.Equal(t, slurmKeyProjections(f.cluster()), n1.Spec.Volumes[0].Projected.Sources)
	// Replicas mode: ordinal names, placed by the scheduler.
	r2 := pods["slurm-r-2"]
	require.NotNil(t, r2)
	assert.Empty(t, r2.Spec.NodeName)
	assert.Contains(t, r2.Spec.Containers[0].Args, "slurm-r-2")

	// Level-based: nothing changes on another pass.
	f.reconcile()
	for name, p := range f.workers() {
		assert.Equal(t, pods[name].ResourceVersion, p.ResourceVersion, name)
	}

	// A node leaving the selector loses its worker, with an event; scaling replicas down too.
	f.events()
	n2 := &v1.Node{}
	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Name: "n2"}, n2))
	n2.Labels["pool"] = "other"
	require.NoError(t, f.kube.Update(context.Background(), n2))
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.NodeSets[1].Replicas = ptr[int32](2) })
	f.reconcile()
	pods = f.workers()
	assert.NotContains(t, pods, "slurm-cpu-n2")
	assert.NotContains(t, pods, "slurm-r-2")
	assert.Len(t, pods, 3)
	assert.Equal(t, int32(3), f.cluster().Status.DesiredWorkers)
	ev := strings.Join(f.events(), "\n")
	assert.Contains(t, ev, "Deleted worker pod slurm-cpu-n2 (Slurm node n2): its NodeSet no longer asks for it")
	assert.Contains(t, ev, "Deleted worker pod slurm-r-2 (Slurm node slurm-r-2)")
}

// An update replaces one worker at a time, and only while the others are ready.
func TestWorkerUpdateOneAtATime(t *testing.T) {
	f := newWorkersFixture(t, 3)
	for _, p := range f.workers() {
		if p.Labels[nodeSetLabel] == "r" {
			f.setReady(p, true)
		}
	}
	f.reconcile()
	assert.Equal(t, int32(3), f.cluster().Status.ReadyWorkers)

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.NodeSets[0].Image = "kubeslurm/slurmd:next" })
	f.reconcile()
	pods := f.workers()
	assert.Len(t, pods, 2, "one worker replaced at a time (it is recreated on the next pass)")
	f.reconcile()
	pods = f.workers()
	require.Len(t, pods, 3)
	var updated []string
	for name, p := range pods {
		if p.Spec.Containers[0].Image == "kubeslurm/slurmd:next" {
			updated = append(updated, name)
			assert.False(t, isReady(p))
		}
	}
	require.Len(t, updated, 1)
	// While the new pod is not ready, no other worker goes.
	f.reconcile()
	assert.Len(t, f.workers(), 3)
	f.setReady(f.workers()[updated[0]], true)
	f.reconcile()
	assert.Len(t, f.workers(), 2, "the next one goes once the new pod is ready")
}

// With spec.computeDomain, slurmd claims the domain's channel (NVIDIA's driver then adds
// the worker's node to the domain).
func TestWorkerClaimsTheComputeDomainChannel(t *testing.T) {
	c := newCluster()
	set := &slurmv1.NodeSetSpec{Name: "gpu"}
	p, err := workerPod(c, worker{set: set, slurm: "n1", kubeNode: "n1"})
	require.NoError(t, err)
	assert.Empty(t, p.Spec.ResourceClaims)

	c.Spec.ComputeDomain = &slurmv1.ComputeDomainSpec{Enabled: true}
	p, err = workerPod(c, worker{set: set, slurm: "n1", kubeNode: "n1"})
	require.NoError(t, err)
	require.Len(t, p.Spec.ResourceClaims, 1)
	assert.Equal(t, "slurm-compute-domain-channel", *p.Spec.ResourceClaims[0].ResourceClaimTemplateName)
	require.Len(t, p.Spec.Containers[0].Resources.Claims, 1)
	assert.Equal(t, p.Spec.ResourceClaims[0].Name, p.Spec.Containers[0].Resources.Claims[0].Name)
}

// nodeSets[].gpus: each worker registers its own node's count of the GPU resource.
func TestWorkerGPUsFromItsNode(t *testing.T) {
	gpuNode := func(name, res, count string) *v1.Node {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if res != "" {
			n.Status.Allocatable = v1.ResourceList{v1.ResourceName(res): resource.MustParse(count)}
		}
		return n
	}
	for _, tc := range []struct {
		name     string
		gpus     *slurmv1.NodeSetGPUs
		node     *v1.Node
		wantConf string
	}{
		{"no gpus section", nil, gpuNode("n", "nvidia.com/gpu", "8"), "Features=g"},
		{"device plugin's count", &slurmv1.NodeSetGPUs{}, gpuNode("n", "nvidia.com/gpu", "8"), "Features=g Gres=gpu:8"},
		{"typed", &slurmv1.NodeSetGPUs{Type: "h100"}, gpuNode("n", "nvidia.com/gpu", "4"), "Features=g Gres=gpu:h100:4"},
		{"another resource", &slurmv1.NodeSetGPUs{ResourceName: "example.com/accel"}, gpuNode("n", "example.com/accel", "2"), "Features=g Gres=gpu:2"},
		{"node without the resource", &slurmv1.NodeSetGPUs{}, gpuNode("n", "", ""), "Features=g"},
		{"none allocatable", &slurmv1.NodeSetGPUs{}, gpuNode("n", "nvidia.com/gpu", "0"), "Features=g"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := &slurmv1.NodeSetSpec{Name: "g", GPUs: tc.gpus}
			w := worker{set: set, slurm: "n", kubeNode: "n", gpus: nodeGPUs(set, tc.node)}
			p, err := workerPod(newCluster(), w)
			require.NoError(t, err)
			args := p.Spec.Containers[0].Args
			assert.Equal(t, tc.wantConf, args[len(args)-1])
			visible := false
			for _, e := range p.Spec.Containers[0].Env {
				visible = visible || e == v1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}
			}
			assert.Equal(t, strings.Contains(tc.wantConf, "Gres="), visible, "NVIDIA_VISIBLE_DEVICES=all")
			assert.Empty(t, p.Spec.Containers[0].Resources.Requests, "the worker holds no GPU")
		})
	}
}

// spec.dcgmJobMapping: a worker with GPUs mounts its node's mapping directory where the
// prolog writes; one without GPUs, or a cluster without the mapping, does not.
func TestWorkerMountsTheDCGMJobMapping(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mapping *slurmv1.DCGMJobMappingSpec
		gpus    int64
		wantDir string
	}{
		{"no mapping", nil, 4, ""},
		{"default directory", &slurmv1.DCGMJobMappingSpec{}, 4, "/var/lib/dcgm-exporter/job-mapping"},
		{"own directory", &slurmv1.DCGMJobMappingSpec{Dir: "/srv/dcgm/map"}, 4, "/srv/dcgm/map"},
		{"worker without GPUs", &slurmv1.DCGMJobMappingSpec{}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster()
			c.Spec.DCGMJobMapping = tc.mapping
			set := &slurmv1.NodeSetSpec{Name: "g", GPUs: &slurmv1.NodeSetGPUs{}}
			p, err := workerPod(c, worker{set: set, slurm: "n", kubeNode: "n", gpus: tc.gpus})
			require.NoError(t, err)
			var hostPath, mountPath string
			for _, v := range p.Spec.Volumes {
				if v.HostPath != nil {
					hostPath = v.HostPath.Path
					assert.Equal(t, v1.HostPathDirectoryOrCreate, *v.HostPath.Type)
				}
			}
			for _, m := range p.Spec.Containers[0].VolumeMounts {
				if m.Name == "dcgm-job-mapping" {
					mountPath = m.MountPath
					assert.False(t, m.ReadOnly)
				}
			}
			assert.Equal(t, tc.wantDir, hostPath)
			assert.Equal(t, tc.wantDir, mountPath)
		})
	}
}

// nodeSets[].port: slurmd registers it (--conf Port=), and the pod's port and probe follow.
func TestWorkerPort(t *testing.T) {
	for _, port := range []*int32{nil, ptr[int32](6838)} {
		set := &slurmv1.NodeSetSpec{Name: "g", Port: port}
		p, err := workerPod(newCluster(), worker{set: set, slurm: "n", kubeNode: "n"})
		require.NoError(t, err)
		want, conf := int32(SlurmdPort), "Features=g"
		if port != nil {
			want, conf = *port, "Features=g Port=6838"
		}
		ctr := p.Spec.Containers[0]
		assert.Equal(t, conf, ctr.Args[len(ctr.Args)-1])
		assert.Equal(t, want, ctr.Ports[0].ContainerPort)
		assert.Equal(t, want, ctr.ReadinessProbe.TCPSocket.Port.IntVal)
	}
}

// A NodeSet's node options are the worker's registration, after what kubeslurm sets; one
// Slurm could not read makes no pod.
func TestWorkerNodeOptions(t *testing.T) {
	set := &slurmv1.NodeSetSpec{Name: "g", NodeOptions: map[string]string{"realmemory": "7900", "CPUs": "4", "MemSpecLimit": "512"}}
	p, err := workerPod(newCluster(), worker{set: set, slurm: "n", kubeNode: "n"})
	require.NoError(t, err)
	ctr := p.Spec.Containers[0]
	assert.Equal(t, "Features=g CPUs=4 MemSpecLimit=512 RealMemory=7900", ctr.Args[len(ctr.Args)-1])

	set.NodeOptions = map[string]string{"CPUs": "4 Gres=gpu:8"}
	_, err = workerPod(newCluster(), worker{set: set, slurm: "n", kubeNode: "n"})
	require.ErrorContains(t, err, "nodeOptions: CPUs")
}

// Node options Slurm could not read are refused in ConfigValid with an event, and the
// running workers are left as they are.
func TestWorkerNodeOptionsRefused(t *testing.T) {
	f := newWorkersFixture(t, 1)
	before := f.workers()["slurm-r-0"]
	require.NotNil(t, before)
	f.events()
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.NodeSets[0].NodeOptions = map[string]string{"Feature": "x"} })
	f.reconcile()
	cond := condition(f.cluster(), slurmv1.ConditionConfigValid)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Contains(t, cond.Message, `nodeSets[r]: nodeOptions: "Feature" is not a node parameter a NodeSet may set`)
	assert.Contains(t, f.events(), "Warning SlurmConfigRefused "+cond.Message)
	after := f.workers()["slurm-r-0"]
	require.NotNil(t, after, "the worker is kept")
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "and not touched")
}

// A change of both slurm.conf and the workers restarts slurmctld first: workers are
// replaced or removed only once slurmctld runs the new configuration (ConfigApplied), so a
// going worker drains through a slurmctld that is up, and a new one registers with the
// configuration made for it.
func TestWorkersWaitForSlurmctldOnTheNewConfiguration(t *testing.T) {
	f := newWorkersFixture(t, 2)
	before := f.workers()
	require.Len(t, before, 2)
	for _, p := range before {
		f.setReady(p, true)
	}
	f.update(func(c *slurmv1.SlurmCluster) {
		c.Spec.NodeSets[0].Image = "kubeslurm/slurmd:next"
		c.Spec.NodeSets[0].Replicas = ptr[int32](1)
		c.Spec.Partitions = []slurmv1.PartitionSpec{{Name: "new", NodeSets: []string{"r"}}}
	})
	f.reconcile()
	cond := meta.FindStatusCondition(f.cluster().Status.Conditions, slurmv1.ConditionConfigApplied)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionFalse, cond.Status, "slurmctld restarting: %s", cond.Message)
	require.Len(t, f.workers(), 2)
	for name, p := range f.workers() {
		assert.Nil(t, p.DeletionTimestamp, "%s kept while slurmctld restarts", name)
		assert.Equal(t, before[name].ResourceVersion, p.ResourceVersion, "%s untouched", name)
	}

	f.controllerUp() // slurmctld runs the new configuration
	f.reconcile()
	after := f.workers()
	assert.NotContains(t, after, "slurm-r-1", "removed: replicas lowered")
	assert.NotContains(t, after, "slurm-r-0", "replaced: the image changed")
	f.reconcile()
	require.Contains(t, f.workers(), "slurm-r-0")
	assert.Equal(t, "kubeslurm/slurmd:next", f.workers()["slurm-r-0"].Spec.Containers[0].Image)
}

// A worker whose slurmd ran while Slurm had no node of its name (the wrapper's exit code)
// is recreated, with a warning.
func TestUnregisteredWorkerRecreated(t *testing.T) {
	f := newWorkersFixture(t, 1)
	p := f.workers()["slurm-r-0"]
	require.NotNil(t, p)
	assert.Contains(t, workerScript, fmt.Sprintf("exit %d", unregisteredExit))

	// A restart for another cause is the kubelet's business.
	p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "slurmd", RestartCount: 1,
		LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1}}}}
	require.NoError(t, f.kube.Status().Update(context.Background(), p))
	f.events()
	f.reconcile()
	assert.Contains(t, f.workers(), "slurm-r-0")
	assert.Empty(t, f.events())

	p = f.workers()["slurm-r-0"]
	p.Status.ContainerStatuses[0].LastTerminationState.Terminated.ExitCode = unregisteredExit
	require.NoError(t, f.kube.Status().Update(context.Background(), p))
	f.reconcile()
	assert.NotContains(t, f.workers(), "slurm-r-0", "deleted")
	assert.Equal(t, []string{"Warning SlurmWorkerNotRegistered Deleted worker pod slurm-r-0 (Slurm node slurm-r-0): its slurmd ran but Slurm had no node of its name; recreating it"}, f.events())
	f.reconcile()
	assert.Contains(t, f.workers(), "slurm-r-0", "recreated")
}

// fakeScontrol is scontrol for workerScript, each call logged: Slurm has the node, but not
// once $LOG.gone exists, and slurmctld cannot be reached while $LOG.down exists.
const fakeScontrol = `#!/bin/sh
echo "scontrol $*" >>"$LOG.commands"
[ -e "$LOG.down" ] && { echo "Unable to contact slurm controller (connect failure)" >&2; exit 1; }
case "$1 $2" in
"show node") [ -e "$LOG.gone" ] && { echo "Node $3 not found"; exit 1; }; echo "NodeName=$3 State=IDLE" ;;
"token lifespan=600") echo SLURM_JWT=token ;;
esac
`

// fakeSqueue is squeue -h -w <node> -o %i beside fakeScontrol: the ids in $LOG.jobs, and
// squeue's error for a node Slurm does not have.
const fakeSqueue = `#!/bin/sh
[ -e "$LOG.down" ] && { echo "squeue: error: Unable to contact slurm controller (connect failure)" >&2; exit 1; }
[ -e "$LOG.gone" ] && { echo "squeue: error: Invalid node name $3" >&2; exit 1; }
cat "$LOG.jobs" 2>/dev/null
exit 0
`

// startWorkerScript runs workerScript for node n1 with a real /bin/sh, a fake slurmd and
// fake Slurm commands, until slurmd has started.
func startWorkerScript(t *testing.T) *daemonRun {
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "scontrol"), []byte(fakeScontrol), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "squeue"), []byte(fakeSqueue), 0o755))
	t.Setenv("SLURM_NODE", "n1")
	t.Setenv("POD_NAME", "slurm-n1")
	d := startDaemonScript(t, fakeReexecutingDaemon, func(dir, daemon string) string {
		script := strings.Replace(workerScript, "KEY_DIR="+slurmconf.ConfigDir+"\n", "KEY_DIR="+dir+"\n", 1)
		return strings.ReplaceAll(script, "/usr/sbin/slurmd", daemon)
	}, bin)
	d.waitFor(1)
	return d
}

// drainCommands are the Slurm commands the script ran, but `scontrol show node`.
func (d *daemonRun) drainCommands() []string {
	commands, err := os.ReadFile(filepath.Join(d.dir, "log.commands"))
	require.NoError(d.t, err)
	var drain []string
	for _, c := range strings.Split(strings.TrimSpace(string(commands)), "\n") {
		if !strings.HasPrefix(c, "scontrol show node") {
			drain = append(drain, c)
		}
	}
	return drain
}

// fakeSlurm changes what fakeScontrol and fakeSqueue answer: the file $LOG.<what>, with
// content, or removed when content is nil.
func (d *daemonRun) fakeSlurm(what string, content []byte) {
	path := filepath.Join(d.dir, "log."+what)
	if content == nil {
		require.NoError(d.t, os.Remove(path))
		return
	}
	require.NoError(d.t, os.WriteFile(path, content, 0o644))
}

// waitSaid waits until the script has written want to its standard error.
func (d *daemonRun) waitSaid(want string) {
	require.Eventually(d.t, func() bool { return strings.Contains(d.stderr(), want) }, 10*time.Second, 50*time.Millisecond,
		"waiting for %q in: %s", want, d.stderr())
}

var drainedAndDeleted = []string{
	"scontrol update nodename=n1 state=DRAIN reason=kubeslurm: worker pod slurm-n1 deleted",
	"scontrol token lifespan=600",
	"scontrol delete nodename=n1",
}

// The worker's script: a key change SIGHUPs slurmd, a slurmd ended by a SIGHUP during its
// re-execution is started again, and the pod's SIGTERM drains the node, stops slurmd and
// deletes the node.
func TestWorkerScriptReloadsDrainsAndDeletes(t *testing.T) {
	d := startWorkerScript(t)
	d.writeKeySet(`{"keys":[]}`)
	d.waitFor(2)
	d.writeKeySet(`{"keys":[{}]}`)
	d.waitFor(3)
	assert.Equal(t, []string{"start", "start", "hup"}, d.lines(), "slurmd ended by the first SIGHUP, started again")

	assert.Equal(t, 0, d.exitCode(syscall.SIGTERM))
	assert.Equal(t, drainedAndDeleted, d.drainCommands())
}

// The drain waits for the node's jobs, and for a slurmctld it cannot reach (asking for the
// drain again until slurmctld takes it), saying what it waits for; a node Slurm no longer
// has is not waited for (squeue -w fails for it for ever): slurmd stops, nothing is deleted.
func TestWorkerScriptDrainWaits(t *testing.T) {
	for _, tc := range []struct {
		name     string
		at       string // the fake Slurm's state when the pod is deleted: a file and its content
		said     string
		then     func(d *daemonRun)
		commands []string
	}{
		{"jobs on the node", "jobs", "waiting for job(s) 42 43 on n1 to end",
			func(d *daemonRun) { d.fakeSlurm("jobs", nil) }, drainedAndDeleted},
		{"slurmctld unreachable", "down", "waiting for slurmctld to take the drain",
			func(d *daemonRun) { d.fakeSlurm("down", nil) }, nil},
		{"node removed while a job runs", "jobs", "waiting for job(s) 42 43 on n1 to end",
			func(d *daemonRun) { d.fakeSlurm("gone", []byte{}) },
			[]string{"scontrol update nodename=n1 state=DRAIN reason=kubeslurm: worker pod slurm-n1 deleted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startWorkerScript(t)
			time.Sleep(300 * time.Millisecond) // its SIGTERM trap set
			d.fakeSlurm(tc.at, []byte("42\n43\n"))
			require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
			d.waitSaid("kubeslurm: " + tc.said)
			time.Sleep(500 * time.Millisecond) // a few rounds of waiting
			require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM), "a second SIGTERM does not start over")
			tc.then(d)
			assert.Equal(t, 0, d.exited())
			commands := d.drainCommands()
			if tc.commands == nil { // the drain asked again until taken
				assert.Greater(t, len(commands), len(drainedAndDeleted), "%v", commands)
				assert.Equal(t, drainedAndDeleted, commands[len(commands)-3:])
			} else {
				assert.Equal(t, tc.commands, commands)
			}
			assert.Equal(t, 1, strings.Count(d.stderr(), "kubeslurm: "+tc.said), "said once: %s", d.stderr())
			assert.Equal(t, 1, strings.Count(d.stderr(), "draining Slurm node n1"), "drained once: %s", d.stderr())
		})
	}
}

func TestWorkerPodName(t *testing.T) {
	c := newCluster()
	set := &slurmv1.NodeSetSpec{Name: "gpu"}
	assert.Equal(t, "slurm-gpu-node-1", workerPodName(c, worker{set: set, slurm: "node-1"}))
	long := strings.Repeat("n", 70)
	name := workerPodName(c, worker{set: set, slurm: long})
	assert.LessOrEqual(t, len(name), 63)
	assert.NotEqual(t, name, workerPodName(c, worker{set: set, slurm: long + "x"}), "distinct nodes keep distinct pods")
}

// A deleted cluster goes only once its workers are gone (they drain through slurmctld,
// which must outlive them).
func TestTeardownWorkersFirst(t *testing.T) {
	c := newCluster()
	c.Spec.NodeSets = []slurmv1.NodeSetSpec{{Name: "r", Mode: slurmv1.NodeSetReplicas, Replicas: ptr[int32](2)}}
	c.Spec.Partitions = nil
	f := newFixture(t, c)
	f.reconcile()
	assert.Contains(t, f.cluster().Finalizers, WorkersFinalizer)
	f.controllerUp()
	f.reconcile()
	require.Len(t, f.workers(), 2)

	// The fake client keeps a deleted object with a finalizer, as the API server does.
	require.NoError(t, f.kube.Delete(context.Background(), f.cluster()))
	for _, p := range f.workers() {
		// Pods that take their time to go (a worker draining).
		p.Finalizers = []string{"test/draining"}
		require.NoError(t, f.kube.Update(context.Background(), p))
	}
	f.reconcile()
	for name, p := range f.workers() {
		assert.NotNil(t, p.DeletionTimestamp, "%s asked to go", name)
	}
	assert.Contains(t, f.cluster().Finalizers, WorkersFinalizer, "held while workers drain")

	for _, p := range f.workers() {
		p.Finalizers = nil
		require.NoError(t, f.kube.Update(context.Background(), p))
	}
	f.reconcile()
	err := f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm"}, &slurmv1.SlurmCluster{})
	assert.True(t, apierrors.IsNotFound(err), "gone once its workers are: %v", err)
}

// graceRecorder records the grace period of each pod delete (nil: the pod's own).
type graceRecorder struct {
	client.Client
	graces map[string]*int64
}

func (g *graceRecorder) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	o := &client.DeleteOptions{}
	o.ApplyOptions(opts)
	g.graces[obj.GetName()] = o.GracePeriodSeconds
	return g.Client.Delete(ctx, obj, opts...)
}

// reconcileRecordingGraces reconciles once, recording the grace period of each delete.
func (f *fixture) reconcileRecordingGraces() map[string]*int64 {
	rec := &graceRecorder{Client: f.kube, graces: map[string]*int64{}}
	f.r.Client = rec
	f.reconcile()
	return rec.graces
}

// twoWorkersDraining is a fixture of a running cluster with two workers whose pods take
// their time to go (a finalizer, as a worker draining), in namespace ns.
func twoWorkersDraining(t *testing.T, ns *v1.Namespace) *fixture {
	c := newCluster()
	c.Spec.NodeSets = []slurmv1.NodeSetSpec{{Name: "r", Mode: slurmv1.NodeSetReplicas, Replicas: ptr[int32](2)}}
	c.Spec.Partitions = nil
	f := newFixture(t, c, ns)
	f.reconcile()
	f.controllerUp()
	f.reconcile()
	require.Len(t, f.workers(), 2)
	for _, p := range f.workers() {
		p.Finalizers = []string{"test/draining"}
		require.NoError(t, f.kube.Update(context.Background(), p))
	}
	return f
}

// A cluster deleted alone leaves its workers their drain grace; deleted with its
// namespace, they get a few seconds (slurmctld goes with them, so they could not drain).
func TestTeardownInTerminatingNamespace(t *testing.T) {
	for _, nsGoing := range []bool{false, true} {
		t.Run(fmt.Sprintf("namespace going %v", nsGoing), func(t *testing.T) {
			ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hpc", Finalizers: []string{"test/content"}}}
			f := twoWorkersDraining(t, ns)
			if nsGoing {
				require.NoError(t, f.kube.Delete(context.Background(), ns))
			}
			require.NoError(t, f.kube.Delete(context.Background(), f.cluster()))
			graces := f.reconcileRecordingGraces()
			require.Len(t, graces, 2)
			for name, grace := range graces {
				if nsGoing {
					assert.Equal(t, ptr[int64](drainlessGrace), grace, name)
				} else {
					assert.Nil(t, grace, "%s keeps its drain grace", name)
				}
			}
		})
	}
}

// While its namespace is being deleted (the cluster itself not yet: Kubernetes deletes
// pods first), a cluster's workers are deleted with a few seconds' grace, over the
// namespace controller's deletion with their drainSeconds; nothing is made anew; once they
// are gone, the namespace gets an annotation saying so (once).
func TestWorkersStoppedWhenNamespaceGoes(t *testing.T) {
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hpc", Finalizers: []string{"test/content"}}}
	f := twoWorkersDraining(t, ns)
	require.NoError(t, f.kube.Delete(context.Background(), ns))
	// The namespace controller deletes the pods with their own grace.
	for _, p := range f.workers() {
		require.NoError(t, f.kube.Delete(context.Background(), p))
	}
	require.NoError(t, f.kube.Delete(context.Background(), f.configMap()))
	graces := f.reconcileRecordingGraces()
	require.Len(t, graces, 2)
	for name, grace := range graces {
		assert.Equal(t, ptr[int64](drainlessGrace), grace, name)
	}
	err := f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: ConfigMapName(f.cluster())}, &v1.ConfigMap{})
	assert.True(t, apierrors.IsNotFound(err), "no ConfigMap made in a namespace being deleted: %v", err)
	key := wellknown.WorkersStoppedAnnotationPrefix + "slurm"
	namespace := func() *v1.Namespace {
		got := &v1.Namespace{}
		require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Name: "hpc"}, got))
		return got
	}
	assert.NotContains(t, namespace().Annotations, key, "workers still there")

	for _, p := range f.workers() {
		p.Finalizers = nil
		require.NoError(t, f.kube.Update(context.Background(), p))
	}
	require.Empty(t, f.workers())
	f.reconcile()
	stopped := namespace().Annotations[key]
	_, err = time.Parse(time.RFC3339, stopped)
	assert.NoError(t, err, "annotation %s=%q", key, stopped)
	rv := namespace().ResourceVersion
	f.reconcile()
	assert.Equal(t, rv, namespace().ResourceVersion, "written once")
}

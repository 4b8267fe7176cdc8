package main

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"k8s.io/klog/v2"

	"github.com/kubeslurm/kubeslurm/deploy/local/mountns"
)

// containerIDPrefix starts a container's ID, followed by its main process's PID.
const containerIDPrefix = "podrunner://"

// containerPID is the PID of a container ID of this runner's.
func containerPID(id string) (int, bool) {
	s, ok := strings.CutPrefix(id, containerIDPrefix)
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(s)
	return pid, err == nil && pid > 0
}

// sameStart: a process that started at procStart (seconds since the epoch, to the clock
// tick) is the one a status says started at startedAt. The runner takes the time just after
// starting the process, and the API keeps it to the second; a PID used again is a process
// started later.
func sameStart(procStart float64, startedAt time.Time) bool {
	return math.Abs(procStart-float64(startedAt.Unix())) < 2
}

// endLeftRunning ends the containers of the pod that a runner before this one started and
// left running. A runner killed alone (its machine still up) leaves its containers'
// processes behind, and the ones this runner starts would run beside them: two slurmd on one
// port, two slurmctld on one state directory. The pod's status names each running
// container's main process (its ID) and its start; if that process is still alive, it and
// every process of its mount namespace are killed before anything starts again.
func (pr *podRun) endLeftRunning() {
	for _, cs := range pr.pod.Status.ContainerStatuses {
		if cs.State.Running == nil {
			continue
		}
		pid, ok := containerPID(cs.ContainerID)
		if !ok {
			continue
		}
		// Held first, then checked: the namespace is that process's if the process is.
		ns, err := mountns.Open(pid)
		if err != nil {
			continue // gone, as after a machine's crash
		}
		if !startedAt(pid, cs.State.Running.StartedAt.Time) {
			_ = ns.Close()
			continue
		}
		klog.InfoS("ending the processes a runner before this one left running", "pod", klog.KObj(pr.pod), "container", cs.Name, "pid", pid)
		if err := ns.Kill(); err != nil {
			klog.ErrorS(err, "ending a container left running", "pod", klog.KObj(pr.pod), "container", cs.Name)
		}
		_ = ns.Close()
	}
}

// startedAt: process pid is alive and started at t (sameStart).
func startedAt(pid int, t time.Time) bool {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return false
	}
	st, err := p.Stat()
	if err != nil {
		return false
	}
	start, err := st.StartTime()
	return err == nil && sameStart(start, t)
}

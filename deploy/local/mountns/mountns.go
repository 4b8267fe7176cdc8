// Package mountns finds and ends the processes of a mount namespace: the local cluster's
// containers (the pod runner's) are each a mount namespace of their own, with every process
// they fork in it, a Slurm job step that slurmstepd puts in a session of its own included.
// A container runtime ends all of a container's processes with it (its cgroup, its PID
// namespace); the pod runner, and the e2e tests' machine crash, do the same by namespace,
// since a process group does not hold them all.
package mountns

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Of is process pid's mount namespace, as its /proc/PID/ns/mnt link reads
// ("mnt:[4026532...]").
func Of(pid int) (string, error) {
	return os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "mnt"))
}

// Processes lists the live processes whose mount namespace is ns. A process
// that ends while it is read is skipped (its link no longer reads).
func Processes(ns string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if got, err := Of(pid); err == nil && got == ns {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Kill SIGKILLs every process in mount namespace ns until none is left
// (one may fork while the others are killed). It refuses the caller's own namespace: a
// container whose namespace was read before it had its own would otherwise take the host's
// processes with it.
func Kill(ns string) error {
	own, err := Of(os.Getpid())
	if err != nil {
		return err
	}
	if ns == "" || ns == own {
		return fmt.Errorf("refusing to kill the processes of mount namespace %q: it is not a container's own", ns)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		pids, err := Processes(ns)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of mount namespace %s outlived SIGKILL", pids, ns)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

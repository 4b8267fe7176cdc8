// Package mountns finds and ends the processes of a mount namespace: the local cluster's
// containers (the pod runner's) are each a mount namespace of their own, with every process
// they fork in it, a Slurm job step that slurmstepd puts in a session of its own included.
// A container runtime ends all of a container's processes with it (its cgroup, its PID
// namespace); the pod runner, and the e2e tests' machine crash, do the same by namespace,
// since a process group does not hold them all.
//
// A namespace is found by its inode number ("mnt:[4026532...]"), which the kernel gives to a
// new namespace as soon as the old one is freed (the lowest free number). So a namespace is
// held open (Open) from while its first process runs until its processes are killed: the
// number then cannot name another namespace, such as one a Slurm command just made.
package mountns

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Namespace is a mount namespace held open.
type Namespace struct {
	f  *os.File
	id string
}

// Open holds process pid's mount namespace. The caller must know pid to be the process it
// means, e.g. its own child not yet waited for.
func Open(pid int) (*Namespace, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "ns", "mnt"))
	if err != nil {
		return nil, err
	}
	id, err := os.Readlink(filepath.Join("/proc/self/fd", strconv.Itoa(int(f.Fd()))))
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &Namespace{f: f, id: id}, nil
}

// String is the namespace as its /proc/PID/ns/mnt links read.
func (n *Namespace) String() string { return n.id }

// Close lets the namespace go (once its processes have too).
func (n *Namespace) Close() error { return n.f.Close() }

// Of is process pid's mount namespace, as its /proc/PID/ns/mnt link reads.
func Of(pid int) (string, error) {
	return os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "mnt"))
}

// Processes lists the live processes in the namespace. A process that ends while it is
// read is skipped (its link no longer reads).
func (n *Namespace) Processes() ([]int, error) {
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
		if got, err := Of(pid); err == nil && got == n.id {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Kill SIGKILLs every process in the namespace until none is left (one may fork while the
// others are killed). It refuses the caller's own namespace: a container whose namespace
// was read before it had its own would otherwise take the host's processes with it.
func (n *Namespace) Kill() error {
	own, err := Of(os.Getpid())
	if err != nil {
		return err
	}
	if n.id == own {
		return fmt.Errorf("refusing to kill the processes of mount namespace %s: it is not a container's own", n.id)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		pids, err := n.Processes()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of mount namespace %s outlived SIGKILL", pids, n.id)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

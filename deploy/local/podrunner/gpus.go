package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The runner plays NVIDIA's container runtime for the Slurm images' containers: a container
// whose NVIDIA_VISIBLE_DEVICES names GPUs of its node gets them as the runtime mounts them,
// a character device /dev/nvidia<minor> each (and /dev/nvidiactl) and the driver's
// /proc/driver/nvidia/gpus/<PCI bus id>/information. slurmd's AutoDetect=nvidia reads exactly
// these, so a SlurmCluster worker's GPUs are detected and handed to jobs by index as on a
// GPU node. The devices are fakes: no driver answers behind them (this machine has no GPU).
// How many GPUs the node "has" is its nvidia.com/gpu.count label, which NVIDIA's GPU feature
// discovery sets from the hardware (the device plugin's nvidia.com/gpu resource is what it
// offers to pods, which may differ).

const (
	gpuCountLabel     = "nvidia.com/gpu.count"
	visibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"
	// nvidiaMajor is the NVIDIA driver's character device major number; nvidiactl is minor 255.
	nvidiaMajor    = 195
	nvidiactlMinor = 255
	// fakeGPUModel is the model the fake GPUs report; Slurm's type for it is kubeslurm_fake_gpu.
	fakeGPUModel = "Kubeslurm Fake GPU"
)

// nodeGPUCount is the number of GPUs node has by its nvidia.com/gpu.count label (0 without).
func nodeGPUCount(node *v1.Node) (int, error) {
	s, ok := node.Labels[gpuCountLabel]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n >= nvidiactlMinor {
		return 0, fmt.Errorf("node %s: label %s=%q is not a GPU count", node.Name, gpuCountLabel, s)
	}
	return n, nil
}

// visibleGPUs is the device minors a container sees for its NVIDIA_VISIBLE_DEVICES value
// on a node with count GPUs, as NVIDIA's runtime reads the variable: unset, empty, "void"
// and "none" give none, "all" every GPU, else a comma-separated list of indices. UUIDs are
// not supported (the fakes have none that a pod could know).
func visibleGPUs(value string, count int) ([]int, error) {
	switch value = strings.TrimSpace(value); value {
	case "", "void", "none":
		return nil, nil
	case "all":
		all := make([]int, count)
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	seen := map[int]bool{}
	var out []int
	for _, f := range strings.Split(value, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || i < 0 {
			return nil, fmt.Errorf("%s=%q: %q is not a GPU index (the pod runner knows no GPU UUIDs)", visibleDevicesEnv, value, f)
		}
		if i >= count {
			return nil, fmt.Errorf("%s=%q: GPU %d is not on this node, which has %d", visibleDevicesEnv, value, i, count)
		}
		if !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	sort.Ints(out)
	return out, nil
}

func formatMinors(minors []int) string {
	s := make([]string, len(minors))
	for i, m := range minors {
		s[i] = strconv.Itoa(m)
	}
	return strings.Join(s, ",")
}

func parseMinors(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		m, err := strconv.Atoi(f)
		if err != nil || m < 0 || m >= nvidiactlMinor {
			return nil, fmt.Errorf("--gpus %q: want device minors 0..254, comma-separated", s)
		}
		out = append(out, m)
	}
	return out, nil
}

// gpuBusID is the PCI bus id the fake GPU of minor m sits at.
func gpuBusID(m int) string { return fmt.Sprintf("0000:%02x:00.0", m+1) }

// gpuInformation is the driver's /proc/driver/nvidia/gpus/<bus id>/information of the fake
// GPU of minor m (the lines and layout of NVIDIA's driver).
func gpuInformation(m int) string {
	return fmt.Sprintf("Model: \t\t %s\nIRQ:   \t\t 0\nGPU UUID: \t GPU-00000000-0000-0000-0000-%012x\n"+
		"Video BIOS: \t ??.??.??.??.??\nBus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\n"+
		"Bus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n", fakeGPUModel, m, gpuBusID(m), m)
}

// mountFakeGPUs gives the container under root (whose /proc, /dev and /sys are bound from
// the host's already) the GPUs of the given minors: a /proc/driver of its own with the GPUs'
// information files, the host's /dev with their character devices added, and the host's PCI
// drivers with the GPUs' nvidia/<bus id>/local_cpulist (every CPU: slurmd gives a GPU the
// cores it reads there). The additions are overlays of the container's own: nothing is made
// on the host.
func mountFakeGPUs(root string, minors []int) error {
	drv := filepath.Join(root, "proc/driver")
	if err := unix.Mount("tmpfs", drv, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0555"); err != nil {
		return fmt.Errorf("tmpfs on /proc/driver: %w", err)
	}
	for _, m := range minors {
		if err := writeFile(filepath.Join(drv, "nvidia/gpus", gpuBusID(m), "information"), gpuInformation(m)); err != nil {
			return err
		}
	}
	if err := unix.Mount("", drv, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("read-only /proc/driver: %w", err)
	}

	pci := filepath.Join(root, "sys/bus/pci/drivers")
	if err := overlay(pci, "/sys/bus/pci/drivers", filepath.Join(root, "run/.podrunner-overlays/pci-drivers")); err != nil {
		return err
	}
	cpus, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return err
	}
	for _, m := range minors {
		if err := writeFile(filepath.Join(pci, "nvidia", gpuBusID(m), "local_cpulist"), string(cpus)); err != nil {
			return err
		}
	}

	dev := filepath.Join(root, "dev")
	if err := overlay(dev, "/dev", filepath.Join(root, "run/.podrunner-overlays/dev")); err != nil {
		return err
	}
	for _, m := range append([]int{nvidiactlMinor}, minors...) {
		name := "nvidia" + strconv.Itoa(m)
		if m == nvidiactlMinor {
			name = "nvidiactl"
		}
		if err := unix.Mknod(filepath.Join(dev, name), unix.S_IFCHR|0o666, int(unix.Mkdev(nvidiaMajor, uint32(m)))); err != nil {
			return fmt.Errorf("mknod /dev/%s: %w", name, err)
		}
	}
	// The overlay shows /dev's own files only: the file systems mounted in it (pts, shm,
	// mqueue) are bound again.
	subs, err := devSubmounts()
	if err != nil {
		return err
	}
	for _, s := range subs {
		if err := unix.Mount(s, filepath.Join(root, s), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", s, err)
		}
	}
	return nil
}

// overlay mounts on dst the host's directory lower with a writable layer in scratch (which
// must be in a file system of the mount namespace's own, such as the container's /run).
func overlay(dst, lower, scratch string) error {
	upper, work := filepath.Join(scratch, "upper"), filepath.Join(scratch, "work")
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("overlay", dst, "overlay", unix.MS_NOSUID, "lowerdir="+lower+",upperdir="+upper+",workdir="+work); err != nil {
		return fmt.Errorf("overlay on %s: %w", lower, err)
	}
	return nil
}

// writeFile writes a read-only file, making its directories.
func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o555); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o444)
}

// devSubmounts lists the host's mount points directly under /dev (a nested one comes with
// its parent's recursive bind), by this process's mount table.
func devSubmounts() ([]string, error) {
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !strings.HasPrefix(m.Mountpoint, "/dev/"), false
	})
	if err != nil {
		return nil, err
	}
	all := make([]string, len(mounts))
	for i, m := range mounts {
		all[i] = m.Mountpoint
	}
	return topLevel(all), nil
}

// topLevel keeps the paths that are not under another path of the list, sorted.
func topLevel(paths []string) []string {
	sort.Strings(paths)
	var out []string
next:
	for _, p := range paths {
		for _, kept := range out {
			if p == kept || strings.HasPrefix(p, kept+"/") {
				continue next
			}
		}
		out = append(out, p)
	}
	return out
}

// gpus is the device minors container c of the pod gets: its NVIDIA_VISIBLE_DEVICES (the
// last value, as in its environment) on its node as the node is now (a relabelled node's
// new count reaches the next container started).
func (pr *podRun) gpus(c *v1.Container) ([]int, error) {
	value, set := "", false
	for _, e := range c.Env {
		if e.Name == visibleDevicesEnv {
			value, set = e.Value, true
		}
	}
	if !set {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	node, err := pr.r.kube.CoreV1().Nodes().Get(ctx, pr.r.node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the node's GPUs for %s: %w", visibleDevicesEnv, err)
	}
	count, err := nodeGPUCount(node)
	if err != nil {
		return nil, err
	}
	return visibleGPUs(value, count)
}

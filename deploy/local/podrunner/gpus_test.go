package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestVisibleGPUs(t *testing.T) {
	for _, tc := range []struct {
		value   string
		count   int
		want    []int
		wantErr string
	}{
		{"", 4, nil, ""},
		{"void", 4, nil, ""},
		{"none", 4, nil, ""},
		{"all", 3, []int{0, 1, 2}, ""},
		{"all", 0, []int{}, ""},
		{"2,0, 2", 4, []int{0, 2}, ""},
		{"3", 3, nil, "GPU 3 is not on this node, which has 3"},
		{"GPU-1234", 3, nil, `"GPU-1234" is not a GPU index`},
		{"-1", 3, nil, "is not a GPU index"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			got, err := visibleGPUs(tc.value, tc.count)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// A container's GPUs come from its NVIDIA_VISIBLE_DEVICES and its node's GPU count label;
// a node that cannot be read, or a label that is no count, fails the container's start.
func TestPodRunGPUs(t *testing.T) {
	node := func(labels map[string]string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	}
	container := func(env ...v1.EnvVar) *v1.Container { return &v1.Container{Env: env} }
	all := v1.EnvVar{Name: visibleDevicesEnv, Value: "all"}
	for _, tc := range []struct {
		name      string
		node      *v1.Node
		container *v1.Container
		want      []int
		wantErr   string
	}{
		{"no variable, no GPUs (and no node read)", nil, container(), nil, ""},
		{"all of the node's", node(map[string]string{gpuCountLabel: "2"}), container(all), []int{0, 1}, ""},
		{"the last value counts", node(map[string]string{gpuCountLabel: "2"}), container(all, v1.EnvVar{Name: visibleDevicesEnv, Value: "1"}), []int{1}, ""},
		{"a node without the label has none", node(nil), container(all), []int{}, ""},
		{"a label that is no count", node(map[string]string{gpuCountLabel: "two"}), container(all), nil, `label nvidia.com/gpu.count="two" is not a GPU count`},
		{"the node cannot be read", nil, container(all), nil, "the node's GPUs for NVIDIA_VISIBLE_DEVICES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset()
			if tc.node != nil {
				kube = fake.NewClientset(tc.node)
			}
			pr := &podRun{r: &runner{kube: kube, node: "n"}}
			got, err := pr.gpus(tc.container)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestTopLevel(t *testing.T) {
	assert.Equal(t, []string{"/dev/a", "/dev/a-b", "/dev/shm"},
		topLevel([]string{"/dev/shm", "/dev/a/c", "/dev/a-b", "/dev/a", "/dev/a/c/d", "/dev/shm"}))
}

func TestParseMinors(t *testing.T) {
	got, err := parseMinors(formatMinors([]int{0, 3, 7}))
	require.NoError(t, err)
	assert.Equal(t, []int{0, 3, 7}, got)
	for _, bad := range []string{"", "1,", "x", "255", "-1"} {
		_, err := parseMinors(bad)
		assert.Error(t, err, bad)
	}
}

const fakeGPURootEnv = "PODRUNNER_TEST_FAKE_GPU_ROOT"

// The fake GPUs are in the container's /proc/driver, /dev and PCI drivers, with the host's
// devices and their file systems (pts, shm) still there, and nothing made on the host. The mounts are
// made by this test's binary run again in a mount namespace of its own.
func TestMountFakeGPUs(t *testing.T) {
	if root := os.Getenv(fakeGPURootEnv); root != "" {
		checkFakeGPUs(t, root)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: it mounts, in a mount namespace of its own")
	}
	root := t.TempDir()
	for _, d := range []string{"proc", "dev", "sys", "run"} {
		require.NoError(t, os.Mkdir(filepath.Join(root, d), 0o755))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMountFakeGPUs$", "-test.v")
	cmd.Env = append(os.Environ(), fakeGPURootEnv+"="+root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "--- PASS: TestMountFakeGPUs")
	entries, err := os.ReadDir(filepath.Join(root, "dev"))
	require.NoError(t, err)
	assert.Empty(t, entries, "the container's /dev was its namespace's alone")
}

func checkFakeGPUs(t *testing.T, root string) {
	for _, d := range []string{"proc", "dev", "sys"} {
		b := bind{Src: "/" + d, Dst: filepath.Join(root, d)}
		require.NoError(t, mountBind(b))
	}
	require.NoError(t, unix.Mount("tmpfs", filepath.Join(root, "run"), "tmpfs", 0, "mode=0755"))
	require.NoError(t, mountFakeGPUs(root, []int{0, 2}))

	gpus, err := os.ReadDir(filepath.Join(root, "proc/driver/nvidia/gpus"))
	require.NoError(t, err)
	require.Len(t, gpus, 2)
	info, err := os.ReadFile(filepath.Join(root, "proc/driver/nvidia/gpus", gpuBusID(2), "information"))
	require.NoError(t, err)
	assert.Contains(t, string(info), "Model: \t\t Kubeslurm Fake GPU\n")
	assert.Contains(t, string(info), "Device Minor: \t 2\n")
	assert.Error(t, os.WriteFile(filepath.Join(root, "proc/driver/x"), nil, 0o644), "read-only")

	cpus, err := os.ReadFile("/sys/devices/system/cpu/online")
	require.NoError(t, err)
	cpulist, err := os.ReadFile(filepath.Join(root, "sys/bus/pci/drivers/nvidia", gpuBusID(0), "local_cpulist"))
	require.NoError(t, err)
	assert.Equal(t, string(cpus), string(cpulist))
	assert.NoDirExists(t, "/sys/bus/pci/drivers/nvidia/"+gpuBusID(0), "made on the host")

	for name, minor := range map[string]uint32{"nvidia0": 0, "nvidia2": 2, "nvidiactl": 255} {
		var st unix.Stat_t
		require.NoError(t, unix.Stat(filepath.Join(root, "dev", name), &st), name)
		assert.Equal(t, uint32(unix.S_IFCHR), st.Mode&unix.S_IFMT, name)
		assert.Equal(t, uint32(nvidiaMajor), unix.Major(st.Rdev), name)
		assert.Equal(t, minor, unix.Minor(st.Rdev), name)
	}
	assert.NoFileExists(t, filepath.Join(root, "dev/nvidia1"))
	assert.FileExists(t, filepath.Join(root, "dev/null"))
	if _, err := os.Stat("/dev/nvidia2"); os.IsNotExist(err) {
		assert.NoFileExists(t, "/dev/nvidia2", "made on the host")
	}
	// The host's /dev/pts (a mount of its own) is there, not the overlay's empty directory.
	if _, err := os.Stat("/dev/pts/ptmx"); err == nil {
		assert.FileExists(t, filepath.Join(root, "dev/pts/ptmx"))
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(mounts), " "+filepath.Join(root, "dev")+" "), "the overlay is mounted")
}

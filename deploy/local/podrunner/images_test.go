package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
)

func TestLookupImage(t *testing.T) {
	for _, tc := range []struct {
		ref, program string
	}{
		{"kubeslurm/scheduler", "kubeslurm-scheduler"},
		{"kubeslurm/scheduler:latest", "kubeslurm-scheduler"},
		{"registry.example:5000/team/kubeslurm/controller:v1@sha256:abc", "kubeslurm-controller"},
		{"kubeslurm/scheduler-extra:1", ""},
		{"notkubeslurm/scheduler", ""},
		{"busybox", ""},
	} {
		im, ok := lookupImage(tc.ref)
		assert.Equal(t, tc.program != "", ok, tc.ref)
		assert.Equal(t, tc.program, im.Program, tc.ref)
	}
}

func TestCommandLine(t *testing.T) {
	c := &v1.Container{Image: "kubeslurm/controller:x", Args: []string{"--a"}}
	got, err := commandLine("/b", c)
	require.NoError(t, err)
	assert.Equal(t, []string{"/b/kubeslurm-controller", "--a"}, got)

	c.Command = []string{"/kubeslurm-controller", "--c"}
	got, err = commandLine("/b", c)
	require.NoError(t, err)
	assert.Equal(t, []string{"/b/kubeslurm-controller", "--c", "--a"}, got)

	c.Command = []string{"/bin/sh"}
	_, err = commandLine("/b", c)
	assert.ErrorContains(t, err, "only the image's entrypoint")

	_, err = commandLine("/b", &v1.Container{Image: "busybox"})
	assert.ErrorContains(t, err, "not in the runner's table")

	// Slurm images run the image's own programs, by absolute path, inside the root.
	c = &v1.Container{Image: "kubeslurm/slurmctld:26.05", Args: []string{"-D"}}
	got, err = commandLine("/b", c)
	require.NoError(t, err)
	assert.Equal(t, []string{"/usr/sbin/slurmctld", "-D"}, got)
	c.Command = []string{"/usr/bin/scontrol", "ping"}
	c.Args = nil
	got, err = commandLine("/b", c)
	require.NoError(t, err)
	assert.Equal(t, []string{"/usr/bin/scontrol", "ping"}, got)
	c.Command = []string{"scontrol"}
	_, err = commandLine("/b", c)
	assert.ErrorContains(t, err, "absolute path")
	got, err = commandLine("/b", &v1.Container{Image: "kubeslurm/slurmdbd:26.05", Args: []string{"-D"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"/usr/sbin/slurmdbd", "-D"}, got)
}

func podOf(images ...string) *v1.Pod {
	p := &v1.Pod{}
	for _, im := range images {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Image: im})
	}
	return p
}

func TestOurs(t *testing.T) {
	assert.True(t, ours(podOf("kubeslurm/scheduler:1")))
	assert.True(t, ours(podOf("kubeslurm/scheduler:1", "kubeslurm/controller:1")))
	assert.False(t, ours(podOf("kubeslurm/scheduler:1", "busybox")))
	assert.False(t, ours(podOf()))
}

// On an adopted kwok node the runner takes only what kwok leaves: images under localhost/.
func TestRunsAdopted(t *testing.T) {
	for _, tc := range []struct {
		images []string
		want   bool
	}{
		{[]string{"localhost/kubeslurm/slurmd:26.05"}, true},
		{[]string{"localhost/kubeslurm/slurmd:26.05", "localhost/kubeslurm/login:26.05"}, true},
		{[]string{"kubeslurm/slurmd:26.05"}, false},                                    // kwok's fake
		{[]string{"localhost/kubeslurm/slurmd:26.05", "kubeslurm/login:26.05"}, false}, // mixed
		{[]string{"localhost/busybox"}, false},                                         // no image of the table
		{[]string{"registry.example/localhost/kubeslurm/slurmd:1"}, false},             // another registry
	} {
		assert.Equal(t, tc.want, runsAdopted(podOf(tc.images...)), "%v", tc.images)
	}
}

func TestParseUserAndBind(t *testing.T) {
	u, err := parseUser("65532:65532:1,2")
	require.NoError(t, err)
	assert.Equal(t, user{UID: 65532, GID: 65532, Groups: []uint32{1, 2}}, *u)
	assert.Equal(t, "65532:65532:1,2", u.String())
	u, err = parseUser("0:0")
	require.NoError(t, err)
	assert.Equal(t, "0:0", u.String())
	for _, bad := range []string{"1", "a:1", "1:2:x", "1:2:3:4"} {
		_, err := parseUser(bad)
		assert.Error(t, err, bad)
	}
	b, err := parseBind("/s:/d:ro")
	require.NoError(t, err)
	assert.Equal(t, bind{Src: "/s", Dst: "/d", RO: true}, b)
	assert.Equal(t, "/s:/d:ro", b.String())
	_, err = parseBind("/s")
	assert.Error(t, err)
}

package main

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestContainerPID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		pid  int
		want bool
	}{
		{id: "podrunner://4242", pid: 4242, want: true},
		{id: "containerd://4242"},
		{id: "podrunner://"},
		{id: "podrunner://0"},
		{id: "podrunner://-1"},
		{id: "podrunner://12ab"},
		{id: ""},
	} {
		pid, ok := containerPID(tc.id)
		assert.Equal(t, tc.want, ok, tc.id)
		if tc.want {
			assert.Equal(t, tc.pid, pid, tc.id)
		}
	}
}

// The status keeps the start to the second, taken just after the process started.
func TestSameStart(t *testing.T) {
	status := time.Date(2026, 12, 6, 11, 0, 5, 0, time.UTC) // as the API keeps it
	at := float64(status.Unix())
	for _, tc := range []struct {
		name      string
		procStart float64
		want      bool
	}{
		{name: "started in the same second", procStart: at + 0.42, want: true},
		{name: "started just before the second the runner read", procStart: at - 0.01, want: true},
		{name: "a PID used again a minute later", procStart: at + 60},
		{name: "a process older than the container", procStart: at - 3600},
	} {
		assert.Equal(t, tc.want, sameStart(tc.procStart, status), tc.name)
	}
}

// A live process is found by its PID and start; the same PID with another start is not it.
func TestStartedAt(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	before := time.Now().Truncate(time.Second)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	assert.True(t, startedAt(cmd.Process.Pid, before))
	assert.False(t, startedAt(cmd.Process.Pid, before.Add(-time.Hour)))
	assert.False(t, startedAt(os.Getpid(), before.Add(time.Hour)))
}

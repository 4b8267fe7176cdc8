package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "c.log")
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	for _, tc := range []struct {
		name, log  string
		lines, max int
		want       string
	}{
		{"the last run only", "\n===== t1: starting [a]\nold fatal\n\n===== t2: starting [a]\nerror: x\nfatal: y\n", 80, 2048, "error: x\nfatal: y"},
		{"no header", "one\ntwo\n", 80, 2048, "one\ntwo"},
		{"a run with no output", "\n===== t1: starting [a]\nold\n\n===== t2: starting [a]\n", 80, 2048, ""},
		{"at most n lines", "\n===== t: starting\n1\n2\n3\n4\n", 2, 2048, "3\n4"},
		{"at most n bytes", "\n===== t: starting\nabcdef\n", 80, 4, "cdef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := logTail(write(tc.log), tc.lines, tc.max)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	// A long log: only its end is read.
	long := "\n===== t: starting\n" + strings.Repeat("line\n", 100000) + "fatal: end\n"
	got, err := logTail(write(long), maxTerminationLogLines, maxTerminationLogBytes)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(got, "line\nfatal: end"))
	assert.Equal(t, maxTerminationLogLines, strings.Count(got, "\n")+1)

	_, err = logTail(filepath.Join(dir, "absent.log"), 80, 2048)
	assert.Error(t, err)
}

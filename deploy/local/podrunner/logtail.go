package main

import (
	"bytes"
	"io"
	"os"
)

const (
	// runHeader starts each run of a container in its log file.
	runHeader = "\n===== "
	// The kubelet's bounds on a termination message taken from the log
	// (kubecontainer.MaxContainerTerminationMessageLogLines and ...LogLength).
	maxTerminationLogLines = 80
	maxTerminationLogBytes = 2048
)

// logTail is the end of the last run's log in file path: after its last runHeader line (and
// no earlier run's), at most maxLines lines and maxBytes bytes, as the kubelet takes a
// failed container's log for FallbackToLogsOnError.
func logTail(path string, maxLines, maxBytes int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	// Enough to find the lines without reading a long-running daemon's whole log.
	window := int64(maxBytes) * 8
	off := max(st.Size()-window, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
		return "", err
	}
	if i := bytes.LastIndex(b, []byte(runHeader)); i >= 0 {
		b = b[i+len(runHeader):]
		// The header line itself is the runner's, not the container's.
		if j := bytes.IndexByte(b, '\n'); j >= 0 {
			b = b[j+1:]
		} else {
			b = nil
		}
	}
	b = bytes.TrimRight(b, "\n")
	lines := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			if lines++; lines == maxLines {
				b = b[i+1:]
				break
			}
		}
	}
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
	}
	return string(b), nil
}

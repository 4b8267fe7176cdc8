package slurm

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrNoGPUIndex: Slurm allocated gres/gpu but names no device index, which is what it does
// for count-only GRES (no File= for the GPUs in the node's gres.conf).
var ErrNoGPUIndex = errors.New("Slurm allocated gres/gpu without device indices: configure File= for the GPUs in the node's gres.conf (or AutoDetect=nvml)")

// WantsGPUs reports whether the job asked for gres/gpu on its nodes.
func (j *Job) WantsGPUs() bool {
	for _, t := range strings.Split(j.TRESPerNode, ",") {
		if t == "gres/gpu" || strings.HasPrefix(t, "gres/gpu:") || strings.HasPrefix(t, "gres/gpu=") {
			return true
		}
	}
	return false
}

// GPUIndices returns the GPU indices Slurm allocated the job on one of its nodes, in
// order. A job holding gres/gpu there without indices is ErrNoGPUIndex.
func (j *Job) GPUIndices(node string) ([]int, error) {
	i := slices.Index(j.Nodes, node)
	switch {
	case i < 0:
		return nil, fmt.Errorf("job %d holds no node %s", j.ID, node)
	case len(j.GRESDetail) != len(j.Nodes):
		// Slurm lists no gres_detail for a job holding no GRES.
		if len(j.GRESDetail) == 0 && j.WantsGPUs() {
			return nil, ErrNoGPUIndex
		}
		if len(j.GRESDetail) == 0 {
			return nil, nil
		}
		return nil, fmt.Errorf("job %d: gres_detail has %d entries for %d nodes", j.ID, len(j.GRESDetail), len(j.Nodes))
	}
	idx, err := GPUIndices(j.GRESDetail[i])
	if err == nil && idx == nil && j.WantsGPUs() {
		return nil, ErrNoGPUIndex
	}
	return idx, err
}

// GPUIndices reads the GPU indices of one node's entry of a job's gres_detail, as Slurm
// writes it: "gpu:2(IDX:0-1)", "gpu:a100:1(IDX:0),gpu:h100:2(IDX:2-3)", "gpu:1(IDX:N/A)".
// Nil without gpu GRES; ErrNoGPUIndex for gpu GRES without indices.
func GPUIndices(detail string) ([]int, error) {
	var out []int
	for _, item := range splitOutsideParens(detail) {
		name, _, _ := strings.Cut(item, "(")
		if n, _, _ := strings.Cut(name, ":"); n != "gpu" {
			continue
		}
		_, list, found := strings.Cut(item, "(IDX:")
		list, closed := strings.CutSuffix(list, ")")
		if !found || !closed || list == "N/A" || list == "" {
			return nil, ErrNoGPUIndex
		}
		idx, err := expandIndices(list)
		if err != nil {
			return nil, fmt.Errorf("gres_detail %q: %w", detail, err)
		}
		out = append(out, idx...)
	}
	return out, nil
}

// expandIndices expands "0-1,3" into 0 1 3.
func expandIndices(list string) ([]int, error) {
	var out []int
	for _, r := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("bad GPU index range %q", r)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// splitOutsideParens splits on commas outside parentheses (the index lists have commas).
func splitOutsideParens(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	if rest := s[start:]; rest != "" {
		parts = append(parts, rest)
	}
	return parts
}

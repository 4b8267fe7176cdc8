package slurm

import (
	"fmt"
	"strconv"
	"strings"
)

// ExpandHostlist expands a Slurm hostlist ("node-[1-3,7],gpu-a") into names, in order.
// Ranges keep their zero padding ("n[01-03]" gives n01 n02 n03). One bracket per name,
// which is what Slurm prints for flat node names.
func ExpandHostlist(list string) []string {
	var out []string
	for _, item := range splitTopLevel(list) {
		open := strings.IndexByte(item, '[')
		closeIdx := strings.LastIndexByte(item, ']')
		if open < 0 || closeIdx < open {
			if item != "" {
				out = append(out, item)
			}
			continue
		}
		prefix, body, suffix := item[:open], item[open+1:closeIdx], item[closeIdx+1:]
		for _, r := range strings.Split(body, ",") {
			lo, hi, found := strings.Cut(r, "-")
			if !found {
				out = append(out, prefix+r+suffix)
				continue
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || b < a {
				out = append(out, prefix+r+suffix) // not a range we understand: keep it verbatim
				continue
			}
			for i := a; i <= b; i++ {
				out = append(out, fmt.Sprintf("%s%0*d%s", prefix, len(lo), i, suffix))
			}
		}
	}
	return out
}

// splitTopLevel splits on commas outside brackets.
func splitTopLevel(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

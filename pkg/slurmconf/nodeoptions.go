package slurmconf

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// valueForm is the form a node parameter's value must have, and how an error names it.
type valueForm struct {
	re   *regexp.Regexp
	desc string
}

var (
	wholeNumber = valueForm{regexp.MustCompile(`^[0-9]+$`), "a whole number"}
	cpuList     = valueForm{regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`), "a list of CPU ids and ranges, such as 0-1,8"}
)

// nodeOption is a node parameter a NodeSet may set: its name as Slurm's documentation
// writes it, and the form of its value.
type nodeOption struct {
	name string
	form valueForm
}

// nodeOptionForms are the node parameters a NodeSet may add to its workers' registration
// (nodeSets[].nodeOptions), by lower-case name. An allow-list, not a deny-list: slurmd
// refuses a --conf it cannot read at every start, so a typo is better refused at admission
// than seen as a worker that never registers.
var nodeOptionForms = func() map[string]nodeOption {
	m := map[string]nodeOption{"cpuspeclist": {"CpuSpecList", cpuList}}
	for _, n := range []string{"CPUs", "Boards", "SocketsPerBoard", "Sockets", "CoresPerSocket", "ThreadsPerCore",
		"RealMemory", "TmpDisk", "CoreSpecCount", "MemSpecLimit", "Weight"} {
		m[strings.ToLower(n)] = nodeOption{n, wholeNumber}
	}
	return m
}()

// NodeOptions checks a NodeSet's nodeOptions and returns them as slurmd's --conf
// parameters, "Key=Value" sorted by key, keys as Slurm's documentation writes them.
func NodeOptions(opts map[string]string) ([]string, error) {
	out := make([]string, 0, len(opts))
	seen := map[string]string{}
	for k, v := range opts {
		f, ok := nodeOptionForms[strings.ToLower(k)]
		if !ok {
			return nil, fmt.Errorf("%q is not a node parameter a NodeSet may set (%s)", k, allowedNodeOptions())
		}
		if other, dup := seen[f.name]; dup {
			return nil, fmt.Errorf("%s is set twice (%q and %q)", f.name, other, k)
		}
		seen[f.name] = k
		if !f.form.re.MatchString(v) {
			return nil, fmt.Errorf("%s: %q is not %s", k, v, f.form.desc)
		}
		out = append(out, f.name+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

func allowedNodeOptions() string {
	names := make([]string, 0, len(nodeOptionForms))
	for _, f := range nodeOptionForms {
		names = append(names, f.name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

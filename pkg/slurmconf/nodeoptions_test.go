package slurmconf

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNodeOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    map[string]string
		want    []string
		wantErr string
	}{
		{name: "none", want: []string{}},
		{name: "the hardware and what the node's own daemons keep, sorted, in Slurm's case",
			opts: map[string]string{"realmemory": "7900", "CPUs": "4", "memspeclimit": "1024", "CoreSpecCount": "1", "cpuspeclist": "0-1,8"},
			want: []string{"CPUs=4", "CoreSpecCount=1", "CpuSpecList=0-1,8", "MemSpecLimit=1024", "RealMemory=7900"}},
		{name: "weight", opts: map[string]string{"Weight": "10"}, want: []string{"Weight=10"}},
		{name: "a parameter of its own field", opts: map[string]string{"Features": "a"}, wantErr: `"Features" is not a node parameter`},
		{name: "the port", opts: map[string]string{"Port": "6818"}, wantErr: `"Port" is not a node parameter`},
		{name: "the node's name", opts: map[string]string{"NodeName": "x"}, wantErr: "not a node parameter"},
		{name: "its state", opts: map[string]string{"State": "DRAIN"}, wantErr: "not a node parameter"},
		{name: "a second parameter in a value", opts: map[string]string{"CPUs": "4 Gres=gpu:8"}, wantErr: "not a whole number"},
		{name: "a line break in a value", opts: map[string]string{"CPUs": "4\nInclude=/etc/passwd"}, wantErr: "not a whole number"},
		{name: "a unit", opts: map[string]string{"RealMemory": "8G"}, wantErr: "not a whole number"},
		{name: "empty", opts: map[string]string{"CPUs": ""}, wantErr: "not a whole number"},
		{name: "a CPU list with a space", opts: map[string]string{"CpuSpecList": "0, 1"}, wantErr: "list of CPU ids"},
		{name: "one parameter twice in two cases", opts: map[string]string{"CPUs": "4", "cpus": "8"}, wantErr: "CPUs is set twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NodeOptions(tc.opts)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

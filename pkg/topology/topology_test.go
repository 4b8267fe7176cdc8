package topology

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const clique = "nvidia.com/gpu.clique"

func config() Config {
	return Config{Name: "kubeslurm", Annotation: "kubeslurm.io/topology-block", LabelKeys: []string{clique, "example.com/rack"},
		DefaultBlock: "unlabelled", BlockSizes: []int{4}}
}

func TestBlockOf(t *testing.T) {
	const ann = "kubeslurm.io/topology-block"
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		want        string
		wantErr     string
	}{
		{name: "no label", want: "unlabelled"},
		{name: "clique label", labels: map[string]string{clique: "c1.0"}, want: "c1.0"},
		{name: "first label key wins", labels: map[string]string{"example.com/rack": "r1", clique: "c1"}, want: "c1"},
		{name: "second label key", labels: map[string]string{"example.com/rack": "r1"}, want: "r1"},
		{name: "empty label value is no label", labels: map[string]string{clique: ""}, want: "unlabelled"},
		{name: "annotation wins over labels", labels: map[string]string{clique: "c1"}, annotations: map[string]string{ann: "b7"}, want: "b7"},
		{name: "annotation with a colon", annotations: map[string]string{ann: "a:b"}, want: "unlabelled", wantErr: "not a valid Slurm block name"},
		{name: "annotation with a comma", annotations: map[string]string{ann: "a,b"}, want: "unlabelled", wantErr: "not a valid Slurm block name"},
		{name: "label starting with a dot", labels: map[string]string{clique: ".x"}, want: "unlabelled", wantErr: "label nvidia.com/gpu.clique"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := config().BlockOf(tt.labels, tt.annotations)
			assert.Equal(t, tt.want, got)
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
			} else {
				assert.NoError(t, err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "ok", mutate: func(*Config) {}},
		{name: "no sizes", mutate: func(c *Config) { c.BlockSizes = nil }},
		{name: "sizes by powers of two", mutate: func(c *Config) { c.BlockSizes = []int{4, 16, 32} }},
		{name: "size not a power-of-two multiple", mutate: func(c *Config) { c.BlockSizes = []int{4, 12} }, wantErr: "power of two"},
		{name: "sizes not increasing", mutate: func(c *Config) { c.BlockSizes = []int{8, 4} }, wantErr: "power of two"},
		{name: "zero size", mutate: func(c *Config) { c.BlockSizes = []int{0} }, wantErr: "positive"},
		{name: "bad name", mutate: func(c *Config) { c.Name = "a:b" }, wantErr: "topology name"},
		{name: "bad default block", mutate: func(c *Config) { c.DefaultBlock = "" }, wantErr: "default block"},
		{name: "no source", mutate: func(c *Config) { c.LabelKeys, c.Annotation = nil, "" }, wantErr: "no label key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
			} else {
				assert.NoError(t, err)
			}
		})
	}
}

func labelled(name, block string) Node {
	return Node{Name: name, Labels: map[string]string{clique: block}}
}

func TestBuildAndRender(t *testing.T) {
	tests := []struct {
		name   string
		nodes  []Node
		extra  []string
		keep   []string
		golden string
		errs   []string
	}{
		{name: "no nodes", golden: "empty.yaml"},
		{
			name: "two cliques of four, an unlabelled node and a Slurm-only node",
			nodes: []Node{
				labelled("node-10", "cliqueB"), labelled("node-2", "cliqueA"), labelled("node-1", "cliqueA"),
				labelled("node-3", "cliqueA"), labelled("node-4", "cliqueA"), labelled("node-5", "cliqueB"),
				labelled("node-6", "cliqueB"), labelled("node-7", "cliqueB"), {Name: "node-8"},
			},
			extra:  []string{"node-1", "login-1"},
			golden: "two-cliques.yaml",
		},
		{
			name:   "invalid annotation goes to the default block",
			nodes:  []Node{{Name: "node-1", Annotations: map[string]string{"kubeslurm.io/topology-block": "x y"}}},
			golden: "invalid.yaml",
			errs:   []string{"node-1"},
		},
		{
			name:   "a block a node's own setting names is kept, empty",
			nodes:  []Node{labelled("node-1", "c2")},
			keep:   []string{"c1", "c2"},
			golden: "kept.yaml",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topo, errs := Build(config(), tt.nodes, tt.extra, tt.keep)
			var errNodes []string
			for _, e := range errs {
				errNodes = append(errNodes, e.Node)
			}
			assert.Equal(t, tt.errs, errNodes)
			got, err := topo.Render()
			require.NoError(t, err)
			path := filepath.Join("testdata", tt.golden)
			if *update {
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
		})
	}
}

func TestBlockOfNode(t *testing.T) {
	topo, _ := Build(config(), []Node{labelled("node-1", "c1"), {Name: "node-2"}}, nil, nil)
	b, ok := topo.BlockOfNode("node-1")
	assert.True(t, ok)
	assert.Equal(t, "c1", b)
	b, _ = topo.BlockOfNode("node-2")
	assert.Equal(t, "unlabelled", b)
	_, ok = topo.BlockOfNode("node-3")
	assert.False(t, ok)
}

func TestBlockOfSetting(t *testing.T) {
	c := config()
	tests := []struct {
		setting string
		want    string
		ok      bool
	}{
		{"kubeslurm:c1", "c1", true},
		{"other:x,kubeslurm:c2", "c2", true},
		{"other:x", "", false},
		{"kubeslurm:", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := c.BlockOfSetting(tt.setting)
		assert.Equal(t, tt.want, got, tt.setting)
		assert.Equal(t, tt.ok, ok, tt.setting)
	}
}

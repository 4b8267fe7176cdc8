// Package topology derives Slurm's block topology (topology/block) from Kubernetes node
// labels and annotations, and renders it as topology.yaml. It is pure: the controller in
// pkg/controller/topology feeds it nodes and writes what it returns.
package topology

import (
	"bytes"
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Config says where a node's block comes from and how the topology is named.
type Config struct {
	// Name of the topology in topology.yaml (and in "<name>:<block>" node settings).
	Name string
	// Annotation on a node naming its block explicitly; it wins over the labels.
	Annotation string
	// LabelKeys are node labels whose value names the block, the first one present wins
	// (e.g. nvidia.com/gpu.clique, set by the GPU operator per NVLink domain).
	LabelKeys []string
	// DefaultBlock holds every node with neither: under topology/block a node outside
	// every block can run no job at all.
	DefaultBlock string
	// BlockSizes are Slurm's block_sizes (base block size first); empty leaves them to Slurm.
	BlockSizes []int
}

// blockName is what Slurm takes as a block name in topology.yaml and in "topo:block":
// no ':' (the separator), ',' or brackets (host lists), or spaces. 64 is Slurm's limit
// for switch names; we hold block names to it too.
var blockName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Validate checks the configuration once, at start-up.
func (c Config) Validate() error {
	if !blockName.MatchString(c.Name) {
		return fmt.Errorf("topology name %q: want 1-64 of [A-Za-z0-9._-], starting with a letter or digit", c.Name)
	}
	if !blockName.MatchString(c.DefaultBlock) {
		return fmt.Errorf("default block %q: want 1-64 of [A-Za-z0-9._-], starting with a letter or digit", c.DefaultBlock)
	}
	if c.Annotation == "" && len(c.LabelKeys) == 0 {
		return fmt.Errorf("no label key and no annotation to read blocks from")
	}
	for i, s := range c.BlockSizes {
		if s <= 0 {
			return fmt.Errorf("block size %d: must be positive", s)
		}
		// Slurm: each size is the previous one times a power of two.
		if i > 0 {
			prev := c.BlockSizes[i-1]
			if s <= prev || s%prev != 0 || !powerOfTwo(s/prev) {
				return fmt.Errorf("block sizes %v: each must be the previous one times a power of two", c.BlockSizes)
			}
		}
	}
	return nil
}

func powerOfTwo(n int) bool { return n > 0 && n&(n-1) == 0 }

// BlockOf returns the block a node belongs in, from its annotation or labels; the
// default block when it names none. An invalid name is an error (the caller puts the node
// in the default block and says why).
func (c Config) BlockOf(labels, annotations map[string]string) (string, error) {
	if v, ok := annotations[c.Annotation]; ok && c.Annotation != "" {
		if !blockName.MatchString(v) {
			return c.DefaultBlock, fmt.Errorf("annotation %s=%q is not a valid Slurm block name", c.Annotation, v)
		}
		return v, nil
	}
	for _, k := range c.LabelKeys {
		if v, ok := labels[k]; ok && v != "" {
			if !blockName.MatchString(v) {
				return c.DefaultBlock, fmt.Errorf("label %s=%q is not a valid Slurm block name", k, v)
			}
			return v, nil
		}
	}
	return c.DefaultBlock, nil
}

// NodeTopology is the "<topology>:<block>" setting of a node in that block.
func (c Config) NodeTopology(block string) string { return c.Name + ":" + block }

// BlockOfSetting returns the block a node's own setting ("<topology>:<block>[,...]") names
// in this topology, if any.
func (c Config) BlockOfSetting(setting string) (string, bool) {
	for _, part := range strings.Split(setting, ",") {
		if name, block, ok := strings.Cut(part, ":"); ok && name == c.Name && block != "" {
			return block, true
		}
	}
	return "", false
}

// Node is what the topology needs of one node.
type Node struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
}

// Topology is one block topology: the blocks in order, each with its nodes.
type Topology struct {
	Name       string
	BlockSizes []int
	Blocks     []Block
}

// Block is one block and its nodes, sorted.
type Block struct {
	Name  string
	Nodes []string
}

// NodeError is a node whose annotation or label could not be used.
type NodeError struct {
	Node string
	Err  error
}

// Build places Kubernetes nodes by their labels, and nodes Slurm has but Kubernetes has
// not (extraNodes) in the default block. keepBlocks are kept, empty if no node is in them:
// slurmctld exits on a reconfigure that drops a block a node's own setting still names.
// Blocks are sorted by name, the default block last; it is always there, even empty, so
// the file always names a usable block.
func Build(c Config, nodes []Node, extraNodes, keepBlocks []string) (Topology, []NodeError) {
	byBlock := map[string][]string{c.DefaultBlock: nil}
	for _, b := range keepBlocks {
		byBlock[b] = nil
	}
	seen := map[string]bool{}
	var errs []NodeError
	for _, n := range nodes {
		b, err := c.BlockOf(n.Labels, n.Annotations)
		if err != nil {
			errs = append(errs, NodeError{Node: n.Name, Err: err})
		}
		byBlock[b] = append(byBlock[b], n.Name)
		seen[n.Name] = true
	}
	for _, n := range extraNodes {
		if !seen[n] {
			byBlock[c.DefaultBlock] = append(byBlock[c.DefaultBlock], n)
			seen[n] = true
		}
	}
	t := Topology{Name: c.Name, BlockSizes: slices.Clone(c.BlockSizes)}
	for name, members := range byBlock {
		slices.SortFunc(members, compareNodeNames)
		t.Blocks = append(t.Blocks, Block{Name: name, Nodes: members})
	}
	slices.SortFunc(t.Blocks, func(a, b Block) int {
		if a.Name == c.DefaultBlock || b.Name == c.DefaultBlock {
			return boolCompare(a.Name == c.DefaultBlock, b.Name == c.DefaultBlock)
		}
		return strings.Compare(a.Name, b.Name)
	})
	slices.SortFunc(errs, func(a, b NodeError) int { return strings.Compare(a.Node, b.Node) })
	return t, errs
}

func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// compareNodeNames orders node-2 before node-10: by length, then bytes, within the
// same prefix length; plain enough for readable files.
func compareNodeNames(a, b string) int {
	if c := cmp.Compare(len(a), len(b)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// BlockOfNode returns the block holding the node, if any.
func (t Topology) BlockOfNode(node string) (string, bool) {
	for _, b := range t.Blocks {
		if slices.Contains(b.Nodes, node) {
			return b.Name, true
		}
	}
	return "", false
}

// The YAML shapes of topology.yaml(5); field order matters: "topology" must come first.
type fileTopology struct {
	Topology       string    `yaml:"topology"`
	ClusterDefault bool      `yaml:"cluster_default"`
	Block          fileBlock `yaml:"block"`
}

type fileBlock struct {
	BlockSizes []int           `yaml:"block_sizes,omitempty,flow"`
	Blocks     []fileBlockItem `yaml:"blocks"`
}

type fileBlockItem struct {
	Block string `yaml:"block"`
	Nodes string `yaml:"nodes,omitempty"`
}

const header = "# Written by kubeslurm-controller from Kubernetes node labels; edits are overwritten.\n"

// Render returns topology.yaml: this topology alone, as the cluster default.
func (t Topology) Render() ([]byte, error) {
	ft := fileTopology{Topology: t.Name, ClusterDefault: true, Block: fileBlock{BlockSizes: t.BlockSizes}}
	for _, b := range t.Blocks {
		ft.Block.Blocks = append(ft.Block.Blocks, fileBlockItem{Block: b.Name, Nodes: strings.Join(b.Nodes, ",")})
	}
	var buf bytes.Buffer
	buf.WriteString(header)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode([]fileTopology{ft}); err != nil {
		return nil, fmt.Errorf("rendering topology.yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Package slurmconf renders a SlurmCluster's Slurm configuration files (slurm.conf,
// cgroup.conf, and slurmdbd.conf without its password) from its spec, and validates the configuration users add to them. Pure: no
// API or Slurm calls.
package slurmconf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/dcgmjobmap"
	"github.com/kubeslurm/kubeslurm/pkg/topology"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// Paths inside the daemons' pods, where their volumes are mounted.
const (
	ConfigDir      = "/etc/slurm"
	JWTKeyPath     = ConfigDir + "/jwt_hs256.key"
	StateSaveDir   = "/var/spool/slurmctld"
	DefaultPort    = 6817
	DefaultDBDPort = 6819
	// Files of the rendered ConfigMap.
	SlurmConfFile    = "slurm.conf"
	CgroupConfFile   = "cgroup.conf"
	JWKSFile         = "jwks.json"
	SlurmdbdConfFile = "slurmdbd.conf"
	GresConfFile     = "gres.conf"
	TopologyFile     = "topology.yaml"
	// The DCGM job mapping scripts (spec.dcgmJobMapping): named by a relative path in
	// slurm.conf, so slurmctld ships them to the configless workers with the configuration.
	DCGMPrologFile = "dcgm-job-mapping-prolog.sh"
	DCGMEpilogFile = "dcgm-job-mapping-epilog.sh"
	// DefaultDatabase is StorageLoc when spec.accounting.database.name is empty.
	DefaultDatabase = "slurm_acct_db"
	// DefaultDatabasePort is the MySQL/MariaDB port.
	DefaultDatabasePort = 3306
	// SlurmdbdRunDir is slurmdbd's own directory in its pod: its PID file, and the
	// slurmdbd.conf it runs with (this file and the password, mode 0600).
	SlurmdbdRunDir = "/run/slurmdbd"
)

// ControllerHost is the slurmctld pod's host name and its Service's DNS name (the
// StatefulSet's pod 0 behind a headless Service of the same name).
func ControllerHost(c *slurmv1.SlurmCluster) (host, addr string) {
	svc := c.Name + "-controller"
	return svc + "-0", svc + "." + c.Namespace + ".svc"
}

// AccountingHost is slurmdbd's Service DNS name.
func AccountingHost(c *slurmv1.SlurmCluster) string {
	return c.Name + "-accounting." + c.Namespace + ".svc"
}

// timeRE is UNLIMITED/INFINITE or a Slurm time: [days-]hours[:minutes[:seconds]] or minutes.
var timeRE = regexp.MustCompile(`^(UNLIMITED|INFINITE|(\d+-)?\d+(:\d+){0,2})$`)

// Validate checks everything of the spec that becomes configuration text, beyond what the
// CRD's schema enforces (which an object read from elsewhere may not have been through).
func Validate(c *slurmv1.SlurmCluster) error {
	if err := ValidateValue(c.SlurmClusterName()); err != nil {
		return fmt.Errorf("clusterName: %w", err)
	}
	sets := map[string]bool{}
	for _, ns := range c.Spec.NodeSets {
		if err := ValidateValue(ns.Name); err != nil {
			return fmt.Errorf("nodeSets: name: %w", err)
		}
		if strings.ContainsAny(ns.Name, ",") {
			return fmt.Errorf("nodeSets: name %q holds a comma", ns.Name)
		}
		sets[ns.Name] = true
		for _, f := range ns.Features {
			if err := ValidateValue(f); err != nil || strings.ContainsAny(f, ",&|") {
				return fmt.Errorf("nodeSets[%s]: feature %q is not a plain name", ns.Name, f)
			}
		}
		if _, err := NodeOptions(ns.NodeOptions); err != nil {
			return fmt.Errorf("nodeSets[%s]: nodeOptions: %w", ns.Name, err)
		}
		if g := ns.GPUs; g != nil {
			if ns.Mode == slurmv1.NodeSetReplicas {
				return fmt.Errorf("nodeSets[%s]: gpus needs mode DaemonSet: a Replicas worker has no node to count GPUs on", ns.Name)
			}
			if g.Type != "" && (ValidateValue(g.Type) != nil || strings.ContainsAny(g.Type, ":,()")) {
				return fmt.Errorf("nodeSets[%s]: gpus: type %q is not a plain name", ns.Name, g.Type)
			}
		}
	}
	if t := c.Spec.Topology; t != nil {
		if len(t.BlockSizes) == 0 {
			// Seen on 26.05.5: "fatal: Blocks do not contain any nodes and the BlockSizes are
			// not set", before any dynamic worker has registered.
			return fmt.Errorf("topology: blockSizes: at least one is needed (slurmctld refuses blocks of unregistered nodes without them)")
		}
		if err := TopologyConfig(c).Validate(); err != nil {
			return fmt.Errorf("topology: %w", err)
		}
	}
	defaults := 0
	for _, p := range c.Spec.Partitions {
		if err := ValidateValue(p.Name); err != nil {
			return fmt.Errorf("partitions: name: %w", err)
		}
		for _, s := range p.NodeSets {
			if !sets[s] {
				return fmt.Errorf("partitions[%s]: nodeSet %q is not in spec.nodeSets", p.Name, s)
			}
		}
		if p.Default {
			defaults++
		}
		if p.MaxTime != "" && !timeRE.MatchString(p.MaxTime) {
			return fmt.Errorf("partitions[%s]: maxTime %q is not UNLIMITED or a Slurm time", p.Name, p.MaxTime)
		}
		for k, v := range p.Options {
			if err := validateKey(k, reservedPartition); err != nil {
				return fmt.Errorf("partitions[%s]: options: %w", p.Name, err)
			}
			if err := ValidateValue(v); err != nil {
				return fmt.Errorf("partitions[%s]: options: %s: %w", p.Name, k, err)
			}
		}
	}
	if defaults > 1 {
		return fmt.Errorf("partitions: %d are marked default, at most one may be", defaults)
	}
	if a := c.Spec.Accounting; a != nil {
		for _, f := range []struct{ name, value string }{
			{"host", a.Database.Host}, {"user", a.Database.User}, {"name", a.Database.Name},
		} {
			if f.name == "name" && f.value == "" {
				continue
			}
			if err := ValidateValue(f.value); err != nil {
				return fmt.Errorf("accounting.database.%s: %w", f.name, err)
			}
		}
		ref := a.Database.PasswordRef
		if errs := validation.IsDNS1123Subdomain(ref.Name); len(errs) > 0 {
			return fmt.Errorf("accounting.database.passwordRef.name %q: %s", ref.Name, strings.Join(errs, "; "))
		}
		if errs := validation.IsConfigMapKey(ref.Key); len(errs) > 0 {
			return fmt.Errorf("accounting.database.passwordRef.key %q: %s", ref.Key, strings.Join(errs, "; "))
		}
		if err := validateLines(a.ExtraConfig, reservedSlurmdbdConf); err != nil {
			return fmt.Errorf("accounting.extraConfig: %w", err)
		}
	}
	if d := c.Spec.DCGMJobMapping; d != nil {
		if !HasGPUs(c) {
			return fmt.Errorf("dcgmJobMapping: no NodeSet has gpus, so no job would hold a GPU to map")
		}
		if _, err := dcgmjobmap.Scripts(d.Dir); err != nil {
			return fmt.Errorf("dcgmJobMapping.dir: %w", err)
		}
	}
	if err := validateLines(c.Spec.ExtraConfig, reservedSlurmConfKeys(c)); err != nil {
		return fmt.Errorf("extraConfig: %w", err)
	}
	if err := ValidateCgroupExtra(c.Spec.CgroupExtraConfig); err != nil {
		return fmt.Errorf("cgroupExtraConfig: %w", err)
	}
	return nil
}

// reservedSlurmConfKeys are the slurm.conf keys extra configuration may not set: always
// reservedSlurmConf, and those the spec's sections make kubeslurm's own.
func reservedSlurmConfKeys(c *slurmv1.SlurmCluster) map[string]bool {
	reserved := reservedSlurmConf
	var ours []string
	if c.ComputeDomainEnabled() {
		// SwitchType is then ours: switch/nvidia_imex.
		ours = append(ours, "SwitchType")
	}
	if HasGPUs(c) {
		// GresTypes is then ours: gpu.
		ours = append(ours, "GresTypes")
	}
	if c.Spec.DCGMJobMapping != nil {
		// The prolog and epilog are then ours.
		ours = append(ours, "Prolog", "Epilog", "PrologFlags")
	}
	if len(ours) > 0 {
		reserved = keySet(append(slices.Collect(maps.Keys(reservedSlurmConf)), ours...)...)
	}
	return reserved
}

// Partition parameters written from the spec's own fields.
var reservedPartition = keySet("PartitionName", "Nodes", "Default", "MaxTime", "State", "PriorityTier", "NodeSet")

// Files are the rendered configuration files, by name.
type Files map[string]string

// Hash is a digest of every file, for the ConfigMap's annotation and the status.
func (f Files) Hash() string {
	names := make([]string, 0, len(f))
	for n := range f {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00%s", n, len(f[n]), f[n])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Option adds to what Render writes.
type Option func(*options)

type options struct {
	jwks, topology []byte
	// extraFrom names where extraText (spec.extraConfigFrom's) came from.
	extraFrom, extraText string
}

// WithTopology adds topology.yaml (spec.topology, built from the workers' nodes by the
// controller): slurmctld reads it next to slurm.conf, and it wins over TopologyPlugin.
func WithTopology(topology []byte) Option { return func(o *options) { o.topology = topology } }

// WithJWKS adds the public keys slurmctld also accepts JWTs of (JWKSFile, named in
// AuthAltParameters beside the cluster's own HS256 key): kubeslurm's controller signs its
// tokens with the private half, so it needs no access to the cluster's key Secret.
func WithJWKS(jwks []byte) Option { return func(o *options) { o.jwks = jwks } }

// WithExtraConfigFrom adds the text of spec.extraConfigFrom, read by the controller from
// the ConfigMap that from names, after spec.extraConfig; validated like it.
func WithExtraConfigFrom(from, text string) Option {
	return func(o *options) { o.extraFrom, o.extraText = from, text }
}

// Render validates the spec and renders the configuration files.
func Render(c *slurmv1.SlurmCluster, opts ...Option) (Files, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := Validate(c); err != nil {
		return nil, err
	}
	if err := validateLines(o.extraText, reservedSlurmConfKeys(c)); err != nil {
		return nil, fmt.Errorf("extraConfigFrom (%s): %w", o.extraFrom, err)
	}
	files := Files{SlurmConfFile: renderSlurmConf(c, o), CgroupConfFile: renderCgroupConf(c)}
	if len(o.jwks) > 0 {
		files[JWKSFile] = string(o.jwks)
	}
	if len(o.topology) > 0 {
		files[TopologyFile] = string(o.topology)
	}
	if c.Spec.Accounting != nil {
		files[SlurmdbdConfFile] = renderSlurmdbdConf(c)
	}
	if HasGPUs(c) {
		files[GresConfFile] = renderGresConf(c)
	}
	if d := c.Spec.DCGMJobMapping; d != nil {
		scripts, err := dcgmjobmap.Scripts(d.Dir) // validated above
		if err != nil {
			return nil, err
		}
		files[DCGMPrologFile], files[DCGMEpilogFile] = scripts[dcgmjobmap.PrologKey], scripts[dcgmjobmap.EpilogKey]
	}
	return files, nil
}

// DCGMJobMappingDir is the node directory of spec.dcgmJobMapping ("" without it).
func DCGMJobMappingDir(c *slurmv1.SlurmCluster) string {
	d := c.Spec.DCGMJobMapping
	switch {
	case d == nil:
		return ""
	case d.Dir == "":
		return dcgmjobmap.DefaultDir
	}
	return d.Dir
}

// HasGPUs: some NodeSet registers its nodes' GPUs.
func HasGPUs(c *slurmv1.SlurmCluster) bool {
	for _, ns := range c.Spec.NodeSets {
		if ns.GPUs != nil {
			return true
		}
	}
	return false
}

// renderGresConf has slurmd find its GPUs' device files itself: each worker registers its
// count (Gres=gpu:N, from its Kubernetes node), and slurmd checks it against the devices
// NVIDIA's driver lists (gpu/nvidia reads /proc/driver/nvidia, no NVML library needed).
// Configless: slurmctld serves this file to the workers with slurm.conf.
func renderGresConf(c *slurmv1.SlurmCluster) string {
	return fmt.Sprintf("# gres.conf of SlurmCluster %s/%s, rendered by kubeslurm.\nAutoDetect=nvidia\n", c.Namespace, c.Name)
}

func renderSlurmConf(c *slurmv1.SlurmCluster, o options) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	port, maxNodes := c.Spec.Controller.Port, c.Spec.Controller.MaxNodeCount
	if port == 0 {
		port = DefaultPort
	}
	if maxNodes == 0 {
		maxNodes = 1024
	}
	host, addr := ControllerHost(c)
	line("# slurm.conf of SlurmCluster %s/%s, rendered by kubeslurm: edit the SlurmCluster, not this file.", c.Namespace, c.Name)
	line("ClusterName=%s", c.SlurmClusterName())
	line("SlurmctldHost=%s(%s)", host, addr)
	line("SlurmctldPort=%d", port)
	// Configless: slurmd and login pods fetch this file from slurmctld.
	line("SlurmctldParameters=enable_configless")
	line("SlurmUser=slurm")
	line("SlurmdUser=root")
	line("StateSaveLocation=%s", StateSaveDir)
	line("SlurmctldPidFile=/run/slurmctld/slurmctld.pid")
	line("SlurmdSpoolDir=/var/spool/slurmd")
	line("SlurmdPidFile=/run/slurmd/slurmd.pid")
	line("")
	line("AuthType=auth/slurm")
	line("CredType=cred/slurm")
	if usersFromDirectory(c) {
		// Login pods resolve users through sssd; slurmctld and the workers do not. Their
		// sackd, holding the key, vouches for each user's name and groups instead.
		line("AuthInfo=use_client_ids")
	}
	line("AuthAltTypes=auth/jwt")
	if len(o.jwks) > 0 {
		line("AuthAltParameters=jwks=%s/%s,jwt_key=%s", ConfigDir, JWKSFile, JWTKeyPath)
	} else {
		line("AuthAltParameters=jwt_key=%s", JWTKeyPath)
	}
	line("")
	line("# Workers are dynamic nodes (slurmd -Z), each with its NodeSet's name as a feature.")
	line("MaxNodeCount=%d", maxNodes)
	line("ReturnToService=2")
	line("SelectType=select/cons_tres")
	line("SelectTypeParameters=CR_Core_Memory")
	if mem := defMemPerCPU(c, o.extraText); mem > 0 {
		line("# A job that asks for no memory gets this much per CPU, not all of each node's.")
		line("DefMemPerCPU=%d", mem)
	}
	if c.Spec.ProcessTracking == slurmv1.ProcessTrackingLinuxProc {
		line("ProctrackType=proctrack/linuxproc")
		line("TaskPlugin=task/affinity")
	} else {
		line("ProctrackType=proctrack/cgroup")
		line("TaskPlugin=task/cgroup,task/affinity")
	}
	line("MpiDefault=none")
	if c.ComputeDomainEnabled() {
		line("")
		line("# spec.computeDomain: each job gets its own IMEX channel of the NVLink ComputeDomain.")
		line("SwitchType=switch/nvidia_imex")
	}
	if HasGPUs(c) {
		line("")
		line("# nodeSets[].gpus: workers register Gres=gpu:<count of their node>.")
		line("GresTypes=gpu")
	}
	if c.Spec.DCGMJobMapping != nil {
		line("")
		line("# spec.dcgmJobMapping: which job holds which GPU, for the DCGM exporter. Relative")
		line("# paths: slurmctld ships the scripts to the workers. Alloc: run at allocation.")
		line("Prolog=%s", DCGMPrologFile)
		line("Epilog=%s", DCGMEpilogFile)
		line("PrologFlags=Alloc")
	}
	if a := c.Spec.Accounting; a != nil {
		line("")
		line("AccountingStorageType=accounting_storage/slurmdbd")
		line("AccountingStorageHost=%s", AccountingHost(c))
		line("AccountingStoragePort=%d", AccountingPort(a))
	}
	if len(c.Spec.NodeSets) > 0 {
		line("")
	}
	for _, ns := range c.Spec.NodeSets {
		line("NodeSet=%s Feature=%s", ns.Name, ns.Name)
	}
	line("")
	parts := c.Spec.Partitions
	if len(parts) == 0 {
		parts = []slurmv1.PartitionSpec{{Name: "main", Default: true}}
	}
	for _, p := range parts {
		line("%s", partitionLine(p))
	}
	if extra := strings.TrimSpace(c.Spec.ExtraConfig); extra != "" {
		line("")
		line("# spec.extraConfig")
		line("%s", extra)
	}
	if extra := strings.TrimSpace(o.extraText); extra != "" {
		line("")
		line("# spec.extraConfigFrom: %s", o.extraFrom)
		line("%s", extra)
	}
	return b.String()
}

// DefaultDefMemPerCPU is spec.defMemPerCPU's default, in MiB.
const DefaultDefMemPerCPU = 1024

// defaultMemoryKeys are the slurm.conf keys of a job's default memory; Slurm takes one.
var defaultMemoryKeys = keySet("DefMemPerCPU", "DefMemPerNode", "DefMemPerGPU")

// defMemPerCPU is the DefMemPerCPU line's value, 0 for none: spec.defMemPerCPU (its
// default when unset), unless extraConfig (or extraConfigFrom's text, extraFrom) gives the
// default memory itself.
func defMemPerCPU(c *slurmv1.SlurmCluster, extraFrom string) int64 {
	if setsAnyKey(c.Spec.ExtraConfig, defaultMemoryKeys) || setsAnyKey(extraFrom, defaultMemoryKeys) {
		return 0
	}
	if v := c.Spec.DefMemPerCPU; v != nil {
		return *v
	}
	return DefaultDefMemPerCPU
}

func partitionLine(p slurmv1.PartitionSpec) string {
	nodes := "ALL"
	if len(p.NodeSets) > 0 {
		nodes = strings.Join(p.NodeSets, ",")
	}
	maxTime, state := p.MaxTime, p.State
	if maxTime == "" {
		maxTime = "UNLIMITED"
	}
	if state == "" {
		state = "UP"
	}
	s := fmt.Sprintf("PartitionName=%s Nodes=%s", p.Name, nodes)
	if p.Default {
		s += " Default=YES"
	}
	s += fmt.Sprintf(" MaxTime=%s State=%s", maxTime, state)
	if p.PriorityTier != nil {
		s += fmt.Sprintf(" PriorityTier=%d", *p.PriorityTier)
	}
	keys := make([]string, 0, len(p.Options))
	for k := range p.Options {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s += fmt.Sprintf(" %s=%s", k, p.Options[k])
	}
	return s
}

func renderCgroupConf(c *slurmv1.SlurmCluster) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# cgroup.conf of SlurmCluster %s/%s, rendered by kubeslurm.\n", c.Namespace, c.Name)
	if c.Spec.ProcessTracking == slurmv1.ProcessTrackingLinuxProc {
		b.WriteString("CgroupPlugin=disabled\n")
	} else {
		b.WriteString("CgroupPlugin=autodetect\n")
	}
	// In a container there is no systemd to ask for a scope.
	b.WriteString("IgnoreSystemd=yes\n")
	if extra := strings.TrimSpace(c.Spec.CgroupExtraConfig); extra != "" {
		b.WriteString("# spec.cgroupExtraConfig\n" + extra + "\n")
	}
	return b.String()
}

// AccountingPort is slurmdbd's port (DbdPort, AccountingStoragePort).
func AccountingPort(a *slurmv1.AccountingSpec) int32 {
	if a.Port != 0 {
		return a.Port
	}
	return DefaultDBDPort
}

// renderSlurmdbdConf renders slurmdbd.conf without StoragePass: the controller may not read
// the password's Secret, so slurmdbd's pod appends the password itself when it starts. The
// file is otherwise no secret: it sits in the ConfigMap with the others.
func renderSlurmdbdConf(c *slurmv1.SlurmCluster) string {
	a := c.Spec.Accounting
	db, port := a.Database.Name, a.Database.Port
	if db == "" {
		db = DefaultDatabase
	}
	if port == 0 {
		port = DefaultDatabasePort
	}
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# slurmdbd.conf of SlurmCluster %s/%s, rendered by kubeslurm: edit the SlurmCluster, not this file.", c.Namespace, c.Name)
	line("# StoragePass is added by slurmdbd's pod, from Secret %s (key %s).", a.Database.PasswordRef.Name, a.Database.PasswordRef.Key)
	line("AuthType=auth/slurm")
	line("AuthAltTypes=auth/jwt")
	line("AuthAltParameters=jwt_key=%s", JWTKeyPath)
	// slurmdbd runs wherever its pod is scheduled: it is the primary on any host, and
	// listens on every address; clients reach it through its Service.
	line("DbdHost=localhost")
	line("DbdPort=%d", AccountingPort(a))
	line("SlurmUser=slurm")
	line("PidFile=%s/slurmdbd.pid", SlurmdbdRunDir)
	line("")
	line("StorageType=accounting_storage/mysql")
	line("StorageHost=%s", a.Database.Host)
	line("StoragePort=%d", port)
	line("StorageUser=%s", a.Database.User)
	line("StorageLoc=%s", db)
	if extra := strings.TrimSpace(a.ExtraConfig); extra != "" {
		line("")
		line("# spec.accounting.extraConfig")
		line("%s", extra)
	}
	return b.String()
}

// usersFromDirectory: some LoginSet takes its users from a directory (sssd), which only the
// login pods see.
func usersFromDirectory(c *slurmv1.SlurmCluster) bool {
	for _, set := range c.Spec.LoginSets {
		if set.SSSDConfRef != nil {
			return true
		}
	}
	return false
}

// Defaults of spec.topology.
const (
	TopologyName         = "kubeslurm"
	DefaultTopologyLabel = "nvidia.com/gpu.clique"
	DefaultTopologyBlock = "unlabelled"
)

// TopologyConfig is spec.topology (with its defaults) as pkg/topology takes it.
func TopologyConfig(c *slurmv1.SlurmCluster) topology.Config {
	t := c.Spec.Topology
	// The node annotation names a block as it does for the local topology controller's nodes.
	cfg := topology.Config{Name: TopologyName, Annotation: wellknown.TopologyBlockAnnotation,
		LabelKeys: []string{DefaultTopologyLabel}, DefaultBlock: DefaultTopologyBlock}
	if t == nil {
		return cfg
	}
	if len(t.LabelKeys) > 0 {
		cfg.LabelKeys = t.LabelKeys
	}
	if t.DefaultBlock != "" {
		cfg.DefaultBlock = t.DefaultBlock
	}
	for _, s := range t.BlockSizes {
		cfg.BlockSizes = append(cfg.BlockSizes, int(s))
	}
	return cfg
}

package slurmjob

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// The annotation keys (after wellknown.SlurmJobAnnotationPrefix) users may set on a pod or
// on its root workload.
const (
	AnnotationPartition   = "partition"
	AnnotationAccount     = "account"
	AnnotationQOS         = "qos"
	AnnotationReservation = "reservation"
	AnnotationTimeLimit   = "time-limit"
	AnnotationJobName     = "job-name"
	AnnotationPriority    = "priority"
	AnnotationNice        = "nice"
	AnnotationConstraints = "constraints"
	AnnotationLicenses    = "licenses"
	AnnotationGRES        = "gres"
	AnnotationCPUsPerTask = "cpus-per-task"
	AnnotationMemPerNode  = "mem-per-node"
	AnnotationMinNodes    = "min-nodes"
	AnnotationMaxNodes    = "max-nodes"
	AnnotationUserID      = "user-id"
	AnnotationGroupID     = "group-id"
	AnnotationWCKey       = "wckey"
	AnnotationDependency  = "dependency"
	AnnotationExclusive   = "exclusive"
	// AnnotationGang on a batch Job makes all its pods one Slurm job (all or nothing).
	AnnotationGang = "gang"
)

// AliasAnnotationPrefix is slurm-bridge's prefix (SlinkyProject/slurm-bridge,
// internal/wellknown): its keys are read as aliases of ours, so a manifest written for
// slurm-bridge works unchanged.
const AliasAnnotationPrefix = "slurmjob.slinky.slurm.net/"

// aliasKeys maps each of slurm-bridge's keys to the setting it is an alias of. Only these
// are known under AliasAnnotationPrefix; slurm-bridge has no nice, dependency or gang.
var aliasKeys = map[string]string{
	"account":      AnnotationAccount,
	"constraints":  AnnotationConstraints,
	"cpu-per-task": AnnotationCPUsPerTask,
	"exclusive":    AnnotationExclusive,
	"gres":         AnnotationGRES,
	"group-id":     AnnotationGroupID,
	"job-name":     AnnotationJobName,
	"licenses":     AnnotationLicenses,
	"max-nodes":    AnnotationMaxNodes,
	"mem-per-node": AnnotationMemPerNode,
	"min-nodes":    AnnotationMinNodes,
	"partition":    AnnotationPartition,
	"priority":     AnnotationPriority,
	"qos":          AnnotationQOS,
	"reservation":  AnnotationReservation,
	"timelimit":    AnnotationTimeLimit,
	"user-id":      AnnotationUserID,
	"wckey":        AnnotationWCKey,
}

// Annotation returns the full annotation key for one of the keys above.
func Annotation(key string) string { return wellknown.SlurmJobAnnotationPrefix + key }

// AliasAnnotation returns the full slurm-bridge key (a key of aliasKeys, e.g. "timelimit").
func AliasAnnotation(key string) string { return AliasAnnotationPrefix + key }

// IsAnnotation reports whether an annotation key is one of ours or one of slurm-bridge's
// (known or not: an unknown key under either prefix is an error, not ignored).
func IsAnnotation(key string) bool {
	return strings.HasPrefix(key, wellknown.SlurmJobAnnotationPrefix) || strings.HasPrefix(key, AliasAnnotationPrefix)
}

// settingOf returns the setting (our key name) an annotation key stands for; ok is false for
// an unknown key under either prefix, and for keys under neither.
func settingOf(key string) (setting string, ok bool) {
	if name, found := strings.CutPrefix(key, wellknown.SlurmJobAnnotationPrefix); found {
		_, ok = parsers[name]
		return name, ok
	}
	if name, found := strings.CutPrefix(key, AliasAnnotationPrefix); found {
		setting, ok = aliasKeys[name]
		return setting, ok
	}
	return "", false
}

// Options are the job fields users set through annotations. Zero values mean unset.
type Options struct {
	Name, Partition, Account, QOS, Reservation, WCKey string
	TimeLimitMinutes                                  *uint32
	Priority                                          *uint32
	Nice                                              *int32
	// Constraints is a validated Slurm constraint expression (--constraint).
	Constraints string
	// Licenses is the validated license list, name[@server][:count] comma-separated.
	Licenses string
	// GRES are generic resources per node (--gres).
	GRES []GRES
	// CPUsPerTask and MemPerNodeMB raise the job's per-node CPUs and memory above the
	// pod's requests (never below them).
	CPUsPerTask  int32
	MemPerNodeMB int64
	// MinNodes and MaxNodes bound the node count, which the pods fix (see ForPod, ForGroup).
	MinNodes, MaxNodes int32
	UserID, GroupID    *uint32
	// Dependencies are the job's dependencies, workload references still unresolved.
	Dependencies []Dependency
	// Exclusive is nil when unset: groups then default to whole nodes, single pods share.
	Exclusive *bool
	// Gang asks for a batch Job's pods to be placed as one Slurm job.
	Gang bool
}

// keyIn returns the annotation key that gives a setting in annotations: ours if present,
// else slurm-bridge's alias (ours when neither is, for messages).
func keyIn(annotations map[string]string, setting string) string {
	if _, ok := annotations[Annotation(setting)]; ok {
		return Annotation(setting)
	}
	for alias, s := range aliasKeys {
		if _, ok := annotations[AliasAnnotation(alias)]; ok && s == setting {
			return AliasAnnotation(alias)
		}
	}
	return Annotation(setting)
}

// apply sets the annotated fields on a spec whose nodes and per-node requests are already
// those of its pods, and refuses the annotations that contradict them. annotations are
// the ones o was parsed from, to name the key at fault.
func (o Options) apply(s *JobSpec, annotations map[string]string) error {
	if o.Name != "" {
		s.Name = o.Name
	}
	s.Partition, s.Account, s.QOS, s.Reservation, s.WCKey = o.Partition, o.Account, o.QOS, o.Reservation, o.WCKey
	s.TimeLimitMinutes, s.Priority, s.Nice = o.TimeLimitMinutes, o.Priority, o.Nice
	s.Constraints, s.Licenses, s.UserID, s.GroupID = o.Constraints, o.Licenses, o.UserID, o.GroupID
	s.Dependencies = o.Dependencies
	if o.Exclusive != nil {
		s.Exclusive = *o.Exclusive
	}
	fail := func(setting, format string, args ...any) error {
		return &AnnotationError{Key: keyIn(annotations, setting), Err: fmt.Errorf(format, args...)}
	}
	if o.CPUsPerTask > 0 {
		if o.CPUsPerTask < s.CPUsPerNode {
			return fail(AnnotationCPUsPerTask, "%d CPUs is less than the %d the pods request: the job must hold what the pods use", o.CPUsPerTask, s.CPUsPerNode)
		}
		s.CPUsPerNode = o.CPUsPerTask
	}
	if o.MemPerNodeMB > 0 {
		if o.MemPerNodeMB < s.MemoryPerNodeMB {
			return fail(AnnotationMemPerNode, "%d MiB is less than the %d MiB the pods request: the job must hold what the pods use", o.MemPerNodeMB, s.MemoryPerNodeMB)
		}
		s.MemoryPerNodeMB = o.MemPerNodeMB
	}
	if len(o.GRES) > 0 {
		// An explicit gpu GRES must say what the nvidia.com/gpu requests say; without
		// such requests (GPUs given by DRA, say) it stands on its own.
		if gpus, named := gpuCount(o.GRES); named && s.GPUsPerNode > 0 && gpus != s.GPUsPerNode {
			return fail(AnnotationGRES, "%d GPUs per node, but the pods request %d %s: make them agree (or leave gpu out of %s)",
				gpus, s.GPUsPerNode, GPUResource, AnnotationGRES)
		}
		s.GRES = o.GRES
	}
	nodes := "a single pod's job has 1 node"
	if s.Group != "" {
		nodes = fmt.Sprintf("a group's job has one node per member, here %d", s.Nodes)
	}
	if o.MinNodes > s.Nodes {
		return fail(AnnotationMinNodes, "%d nodes asked for, but %s", o.MinNodes, nodes)
	}
	if o.MaxNodes > 0 && o.MaxNodes < s.Nodes {
		return fail(AnnotationMaxNodes, "at most %d nodes asked for, but %s", o.MaxNodes, nodes)
	}
	return nil
}

func gpuCount(gres []GRES) (count int64, named bool) {
	for _, g := range gres {
		if g.Name == "gpu" {
			count, named = count+g.Count, true
		}
	}
	return count, named
}

// Slurm names (partitions, accounts, QOS, reservations, wckeys) are plain words; job names
// may also carry the separators pod names are made of. Nothing else reaches Slurm, so no
// value can smuggle a newline, a shell metacharacter or a second option into a request.
var (
	slurmName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	jobName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+=-]{0,199}$`)
	// A GRES type is a word that is not a number (gpu:2 is a count, gpu:a100 a type).
	gresType = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	gresName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,31}$`)
	digits   = regexp.MustCompile(`^[0-9]+$`)
)

type parser func(value string, o *Options) error

func nameField(field func(*Options) *string, re *regexp.Regexp, what string) parser {
	return func(v string, o *Options) error {
		if !re.MatchString(v) {
			return fmt.Errorf("%q is not a valid %s (allowed: %s)", v, what, re.String())
		}
		*field(o) = v
		return nil
	}
}

func boolField(set func(*Options, bool)) parser {
	return func(v string, o *Options) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		set(o, b)
		return nil
	}
}

// wholeNumber reads a decimal integer in [lo, hi] (digits and an optional sign only).
func wholeNumber(v string, lo, hi int64, what string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%q is not %s: want a whole number from %d to %d", v, what, lo, hi)
	}
	return n, nil
}

// Slurm's limits: nice is ±(NICE_OFFSET-3); ids stop below NO_VAL (0xfffffffe).
const (
	maxNice     = 2147483645
	maxID       = 4294967293
	maxNodes    = 100000
	maxCPUs     = 1 << 16
	maxGRESEach = 1 << 20
)

func idField(field func(*Options) **uint32, what string) parser {
	return func(v string, o *Options) error {
		// Root is refused: a placeholder job runs nothing and never needs to be root's.
		n, err := wholeNumber(v, 1, maxID, "a numeric "+what)
		if err != nil {
			return err
		}
		id := uint32(n)
		*field(o) = &id
		return nil
	}
}

func nodeCount(field func(*Options) *int32) parser {
	return func(v string, o *Options) error {
		n, err := wholeNumber(v, 1, maxNodes, "a node count")
		if err != nil {
			return err
		}
		*field(o) = int32(n)
		return nil
	}
}

var parsers = map[string]parser{
	AnnotationPartition:   nameField(func(o *Options) *string { return &o.Partition }, slurmName, "partition name"),
	AnnotationAccount:     nameField(func(o *Options) *string { return &o.Account }, slurmName, "account name"),
	AnnotationQOS:         nameField(func(o *Options) *string { return &o.QOS }, slurmName, "QOS name"),
	AnnotationReservation: nameField(func(o *Options) *string { return &o.Reservation }, slurmName, "reservation name"),
	AnnotationWCKey:       nameField(func(o *Options) *string { return &o.WCKey }, slurmName, "wckey"),
	AnnotationJobName:     nameField(func(o *Options) *string { return &o.Name }, jobName, "job name"),
	AnnotationTimeLimit: func(v string, o *Options) error {
		m, err := ParseTimeLimit(v)
		if err != nil {
			return err
		}
		o.TimeLimitMinutes = &m
		return nil
	},
	AnnotationPriority: func(v string, o *Options) error {
		// slurmrestd's v0.0.44 schema carries priorities as int32, so larger values
		// could be submitted but never read back.
		p, err := strconv.ParseUint(v, 10, 32)
		if err != nil || p > math.MaxInt32 {
			return fmt.Errorf("%q is not a priority: want a whole number from 0 to %d", v, math.MaxInt32)
		}
		p32 := uint32(p)
		o.Priority = &p32
		return nil
	},
	AnnotationNice: func(v string, o *Options) error {
		n, err := wholeNumber(v, -maxNice, maxNice, "a nice value")
		if err != nil {
			return err
		}
		n32 := int32(n)
		o.Nice = &n32
		return nil
	},
	AnnotationConstraints: func(v string, o *Options) error {
		if err := checkConstraints(v); err != nil {
			return err
		}
		o.Constraints = v
		return nil
	},
	AnnotationLicenses: func(v string, o *Options) error {
		l, err := parseLicenses(v)
		if err != nil {
			return err
		}
		o.Licenses = l
		return nil
	},
	AnnotationGRES: func(v string, o *Options) error {
		g, err := ParseGRES(v)
		if err != nil {
			return err
		}
		o.GRES = g
		return nil
	},
	AnnotationCPUsPerTask: func(v string, o *Options) error {
		n, err := parseCPUs(v)
		if err != nil {
			return err
		}
		o.CPUsPerTask = n
		return nil
	},
	AnnotationMemPerNode: func(v string, o *Options) error {
		n, err := ParseMemoryMiB(v)
		if err != nil {
			return err
		}
		o.MemPerNodeMB = n
		return nil
	},
	AnnotationMinNodes: nodeCount(func(o *Options) *int32 { return &o.MinNodes }),
	AnnotationMaxNodes: nodeCount(func(o *Options) *int32 { return &o.MaxNodes }),
	AnnotationUserID:   idField(func(o *Options) **uint32 { return &o.UserID }, "user id"),
	AnnotationGroupID:  idField(func(o *Options) **uint32 { return &o.GroupID }, "group id"),
	AnnotationDependency: func(v string, o *Options) error {
		d, err := ParseDependency(v)
		if err != nil {
			return err
		}
		o.Dependencies = d
		return nil
	},
	AnnotationExclusive: boolField(func(o *Options, b bool) { o.Exclusive = &b }),
	AnnotationGang:      boolField(func(o *Options, b bool) { o.Gang = b }),
}

// AnnotationError names the annotation whose value is wrong, and why.
type AnnotationError struct {
	Key, Value string
	Err        error
}

func (e *AnnotationError) Error() string {
	return fmt.Sprintf("annotation %s: %v", e.Key, e.Err)
}

func (e *AnnotationError) Unwrap() error { return e.Err }

// ParseAnnotations reads every slurmjob annotation, ours and slurm-bridge's aliases. An
// unknown key under either prefix is an error too: a misspelt "time-limt" must not be
// silently ignored. A setting given under both prefixes must have the same value.
func ParseAnnotations(annotations map[string]string) (Options, error) {
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		if IsAnnotation(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys) // report the same first error every time; ours sort before aliases
	var o Options
	keyOf := map[string]string{} // setting → the first key that gave it
	for _, k := range keys {
		v := annotations[k]
		setting, ok := settingOf(k)
		if !ok {
			return Options{}, &AnnotationError{Key: k, Value: v, Err: fmt.Errorf("unknown key; known keys: %s", strings.Join(knownKeysOf(k), ", "))}
		}
		p := parsers[setting]
		if err := p(strings.TrimSpace(v), &o); err != nil {
			return Options{}, &AnnotationError{Key: k, Value: v, Err: err}
		}
		if first, dup := keyOf[setting]; dup {
			// Both prefixes: the two values must mean the same thing ("4G" and "4Gi" do).
			var a, b Options
			_ = p(strings.TrimSpace(annotations[first]), &a)
			_ = p(strings.TrimSpace(v), &b)
			if !reflect.DeepEqual(a, b) {
				return Options{}, &AnnotationError{Key: first, Value: annotations[first], Err: fmt.Errorf(
					"%q conflicts with %s=%q: the same setting under both prefixes must have the same value", annotations[first], k, v)}
			}
			continue
		}
		keyOf[setting] = k
	}
	if o.MinNodes > 0 && o.MaxNodes > 0 && o.MinNodes > o.MaxNodes {
		return Options{}, &AnnotationError{Key: keyOf[AnnotationMinNodes], Err: fmt.Errorf(
			"%d is more than %s=%d", o.MinNodes, keyOf[AnnotationMaxNodes], o.MaxNodes)}
	}
	return o, nil
}

// KnownKeys lists our annotation keys (without prefix), sorted.
func KnownKeys() []string {
	out := make([]string, 0, len(parsers))
	for k := range parsers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// AliasKeys lists slurm-bridge's keys we accept (without prefix), sorted.
func AliasKeys() []string {
	out := make([]string, 0, len(aliasKeys))
	for k := range aliasKeys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func knownKeysOf(key string) []string {
	if strings.HasPrefix(key, AliasAnnotationPrefix) {
		return AliasKeys()
	}
	return KnownKeys()
}

var timeLimitForms = []*regexp.Regexp{
	regexp.MustCompile(`^(?P<m>\d+)$`),
	regexp.MustCompile(`^(?P<m>\d+):(?P<s>\d+)$`),
	regexp.MustCompile(`^(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)$`),
	regexp.MustCompile(`^(?P<d>\d+)-(?P<h>\d+)$`),
	regexp.MustCompile(`^(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+)$`),
	regexp.MustCompile(`^(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)$`),
}

// ParseTimeLimit reads a time limit in any of sbatch's --time forms ("minutes",
// "minutes:seconds", "hours:minutes:seconds", "days-hours", "days-hours:minutes",
// "days-hours:minutes:seconds", or "UNLIMITED"/"INFINITE") and returns whole minutes,
// rounding seconds up as Slurm does. Zero and negative limits are refused.
func ParseTimeLimit(v string) (uint32, error) {
	switch strings.ToUpper(v) {
	case "UNLIMITED", "INFINITE":
		return Unlimited, nil
	}
	for _, re := range timeLimitForms {
		m := re.FindStringSubmatch(v)
		if m == nil {
			continue
		}
		var d, h, mins, s uint64
		for i, name := range re.SubexpNames() {
			if name == "" {
				continue
			}
			n, err := strconv.ParseUint(m[i], 10, 32)
			if err != nil {
				return 0, fmt.Errorf("%q: %v", v, err)
			}
			switch name {
			case "d":
				d = n
			case "h":
				h = n
			case "m":
				mins = n
			case "s":
				s = n
			}
		}
		total := d*24*60 + h*60 + mins + (s+59)/60
		if total == 0 {
			return 0, fmt.Errorf("%q is not a time limit: it must be at least one minute", v)
		}
		if total >= Unlimited-1 {
			return 0, fmt.Errorf("%q is too long a time limit", v)
		}
		return uint32(total), nil
	}
	return 0, fmt.Errorf("%q is not a time limit: use minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED", v)
}

// parseCPUs reads a CPU count: a whole number ("4"), or a Kubernetes CPU quantity as
// slurm-bridge takes it ("500m", "2"), rounded up to whole CPUs as requests are.
func parseCPUs(v string) (int32, error) {
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() <= 0 || q.Cmp(*resource.NewQuantity(maxCPUs, resource.DecimalSI)) > 0 {
		return 0, fmt.Errorf("%q is not a CPU count: want a whole number from 1 to %d (or a Kubernetes CPU quantity such as 1500m, rounded up)", v, maxCPUs)
	}
	return int32((q.MilliValue() + 999) / 1000), nil
}

var slurmMemory = regexp.MustCompile(`^([0-9]+)([KMGT]?)$`)

// ParseMemoryMiB reads a memory size and returns whole MiB, rounded up. Slurm's forms
// (sbatch --mem): a number of MiB, or a number with K, M, G or T (powers of 1024), as
// "4096", "4096M", "4G". Kubernetes binary quantities as slurm-bridge takes them ("4Gi",
// "512Mi") mean the same. Decimal Kubernetes suffixes (k, M as 10^6 ...) are not
// accepted: "4G" is Slurm's 4 GiB here, and a bare number is MiB, not bytes.
func ParseMemoryMiB(v string) (int64, error) {
	const maxMiB = 1 << 40 // an exbibyte: beyond any node, and far from overflow
	bad := fmt.Errorf("%q is not a memory size: use MiB (4096) or a number with K, M, G or T (4G), or Ki, Mi, Gi, Ti (4Gi)", v)
	var mib int64
	if m := slurmMemory.FindStringSubmatch(strings.ToUpper(v)); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > maxMiB<<10 {
			return 0, bad
		}
		switch m[2] {
		case "K":
			mib = ceilDiv(n, 1024)
		case "", "M":
			mib = n
		case "G":
			mib = n << 10
		case "T":
			mib = n << 20
		}
	} else {
		suffix := strings.TrimLeft(v, "0123456789.")
		switch suffix {
		case "Ki", "Mi", "Gi", "Ti":
		default:
			return 0, bad
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return 0, bad
		}
		mib = ceilDiv(q.Value(), 1<<20)
	}
	if mib <= 0 || mib > maxMiB {
		return 0, fmt.Errorf("%q is not a memory size from 1 MiB to %d MiB", v, int64(maxMiB))
	}
	return mib, nil
}

// GRES is one generic resource per node: gpu, gpu:a100:2, shard:4 ...
type GRES struct {
	Name, Type string
	Count      int64
}

// TRES is the GRES in Slurm's tres_per_node form: gres/gpu:a100:2.
func (g GRES) TRES() string {
	s := "gres/" + g.Name
	if g.Type != "" {
		s += ":" + g.Type
	}
	return s + ":" + strconv.FormatInt(g.Count, 10)
}

// ParseGRES reads a comma-separated GRES list in sbatch --gres forms (gpu, gpu:2,
// gpu:a100:2) or Slurm's TRES forms (gres/gpu:2, gres/gpu=2, as slurm-bridge writes
// them). The count defaults to 1; a name:type pair may appear once.
func ParseGRES(v string) ([]GRES, error) {
	var out []GRES
	seen := map[string]bool{}
	for _, item := range strings.Split(v, ",") {
		g, err := parseGRESItem(item)
		if err != nil {
			return nil, fmt.Errorf("%q is not a GRES list (%v): use name[:type][:count], comma-separated, as gpu:a100:2,shard:1", v, err)
		}
		id := g.Name + ":" + g.Type
		if seen[id] {
			return nil, fmt.Errorf("%q names %s twice", v, strings.TrimSuffix(id, ":"))
		}
		seen[id] = true
		out = append(out, g)
	}
	return out, nil
}

func parseGRESItem(item string) (GRES, error) {
	item = strings.TrimPrefix(item, "gres/")
	// gres/gpu=2 (TRES form): "=" before the count.
	if i := strings.LastIndexByte(item, '='); i >= 0 {
		if !digits.MatchString(item[i+1:]) {
			return GRES{}, fmt.Errorf("%q has no count after =", item)
		}
		item = item[:i] + ":" + item[i+1:]
	}
	parts := strings.Split(item, ":")
	g := GRES{Name: parts[0], Count: 1}
	if !gresName.MatchString(g.Name) {
		return GRES{}, fmt.Errorf("%q is not a GRES name", g.Name)
	}
	rest := parts[1:]
	if n := len(rest); n > 0 && digits.MatchString(rest[n-1]) {
		c, err := strconv.ParseInt(rest[n-1], 10, 64)
		if err != nil || c < 1 || c > maxGRESEach {
			return GRES{}, fmt.Errorf("count %q is not from 1 to %d", rest[n-1], maxGRESEach)
		}
		g.Count, rest = c, rest[:n-1]
	}
	switch len(rest) {
	case 0:
	case 1:
		if !gresType.MatchString(rest[0]) || digits.MatchString(rest[0]) {
			return GRES{}, fmt.Errorf("%q is not a GRES type", rest[0])
		}
		g.Type = rest[0]
	default:
		return GRES{}, fmt.Errorf("%q has too many parts", item)
	}
	return g, nil
}

var license = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]{0,63}(@[A-Za-z0-9][A-Za-z0-9._-]{0,63})?)(:([0-9]{1,9}))?$`)

// parseLicenses checks an sbatch --licenses list: name[@server][:count], comma-separated,
// each name once, counts from 1. It returns the list as given (spaces around items dropped).
func parseLicenses(v string) (string, error) {
	var items []string
	seen := map[string]bool{}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		m := license.FindStringSubmatch(item)
		if m == nil || (m[4] != "" && strings.TrimLeft(m[4], "0") == "") {
			return "", fmt.Errorf("%q is not a license list: use name[@server][:count], comma-separated, as matlab:2,ansys", v)
		}
		if seen[m[1]] {
			return "", fmt.Errorf("%q names license %s twice", v, m[1])
		}
		seen[m[1]] = true
		items = append(items, item)
	}
	return strings.Join(items, ","), nil
}

// checkConstraints accepts a Slurm constraint expression (sbatch --constraint) in this
// grammar, written by hand as no Go library parses Slurm's:
//
//	expr    = term { ("&" | "|" | ",") term }
//	term    = ( feature | "(" expr ")" | "[" expr "]" ) [ "*" count ]
//	feature = [A-Za-z0-9][A-Za-z0-9_.-]*
//
// with brackets (matching OR) not nested, at most 1024 characters. Nothing else — no
// space, quote, newline or shell metacharacter — can pass.
func checkConstraints(v string) error {
	if v == "" || len(v) > 1024 {
		return fmt.Errorf("%q is not a constraint expression: want 1 to 1024 characters", v)
	}
	c := constraintParser{in: v}
	if err := c.expr(); err != nil {
		return fmt.Errorf("%q is not a constraint expression (%v): use features joined by & (and), | (or), [..|..] (matching or), (..) and *count, as gpu&(a100|h100)", v, err)
	}
	if c.pos != len(v) {
		return fmt.Errorf("%q is not a constraint expression (unexpected %q at %d): use features joined by & (and), | (or), [..|..] (matching or), (..) and *count", v, v[c.pos], c.pos)
	}
	return nil
}

type constraintParser struct {
	in       string
	pos      int
	brackets int
}

func (c *constraintParser) peek() byte {
	if c.pos < len(c.in) {
		return c.in[c.pos]
	}
	return 0
}

func (c *constraintParser) expr() error {
	for {
		if err := c.term(); err != nil {
			return err
		}
		switch c.peek() {
		case '&', '|', ',':
			c.pos++
		default:
			return nil
		}
	}
}

func isFeatureByte(b byte, first bool) bool {
	alnum := b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
	return alnum || !first && (b == '_' || b == '.' || b == '-')
}

func (c *constraintParser) term() error {
	switch b := c.peek(); {
	case b == '(' || b == '[':
		closing := byte(')')
		if b == '[' {
			if c.brackets > 0 {
				return fmt.Errorf("nested [ at %d", c.pos)
			}
			closing = ']'
		}
		c.pos++
		if b == '[' {
			c.brackets++
		}
		if err := c.expr(); err != nil {
			return err
		}
		if c.peek() != closing {
			return fmt.Errorf("missing %c at %d", closing, c.pos)
		}
		c.pos++
		if b == '[' {
			c.brackets--
		}
	case isFeatureByte(b, true):
		for c.pos < len(c.in) && isFeatureByte(c.in[c.pos], false) {
			c.pos++
		}
	default:
		return fmt.Errorf("a feature name expected at %d", c.pos)
	}
	if c.peek() == '*' {
		c.pos++
		start := c.pos
		for c.pos < len(c.in) && c.in[c.pos] >= '0' && c.in[c.pos] <= '9' {
			c.pos++
		}
		if n, err := strconv.Atoi(c.in[start:c.pos]); err != nil || n < 1 || n > maxNodes {
			return fmt.Errorf("a count from 1 to %d expected after * at %d", maxNodes, start)
		}
	}
	return nil
}

// Dependency types kubeslurm passes to Slurm (sbatch --dependency). Others (singleton,
// aftercorr, time offsets, "?" for any-of) are refused.
const (
	DependencyAfter      = "after"
	DependencyAfterAny   = "afterany"
	DependencyAfterOK    = "afterok"
	DependencyAfterNotOK = "afternotok"
)

// RefKindPod is the kind of a WorkloadRef to a pod placed on its own.
const RefKindPod = "Pod"

// RefKinds are the kinds a WorkloadRef may have: Pod, and the kinds of pkg/workload's
// group keys (workload.Kind*; pkg/workload imports this package, so they are spelt here).
var RefKinds = []string{RefKindPod, "Job", "JobSet", "PodGroup", "PodGroup.scheduling.k8s.io", "LeaderWorkerSet"}

// Dependency is one clause of a job's dependency: Type on every listed job. Workloads are
// references to the jobs of Kubernetes workloads in the pod's namespace, which the
// scheduler resolves into JobIDs before submitting.
type Dependency struct {
	Type      string
	JobIDs    []int32
	Workloads []WorkloadRef
}

// WorkloadRef names a workload in the dependent pod's namespace: Kind/name, or
// LeaderWorkerSet/name/group-index.
type WorkloadRef struct {
	Kind, Name, Replica string
}

func (r WorkloadRef) String() string {
	s := r.Kind + "/" + r.Name
	if r.Replica != "" {
		s += "/" + r.Replica
	}
	return s
}

// GroupKey is the key of the workload's pod group in a namespace (pkg/workload's
// Group.Key: Kind/namespace/name[/replica]).
func (r WorkloadRef) GroupKey(namespace string) string {
	k := r.Kind + "/" + namespace + "/" + r.Name
	if r.Replica != "" {
		k += "/" + r.Replica
	}
	return k
}

// String renders the clause as Slurm reads it, job ids first; a workload reference left
// unresolved is rendered as written, which Slurm refuses rather than ignores.
func (d Dependency) String() string {
	parts := []string{d.Type}
	for _, id := range d.JobIDs {
		parts = append(parts, strconv.Itoa(int(id)))
	}
	for _, w := range d.Workloads {
		parts = append(parts, w.String())
	}
	return strings.Join(parts, ":")
}

const maxDependencyItems = 64

// ParseDependency reads a dependency: clauses joined by "," (all must hold), each
// type:item[:item...] with type after, afterany, afterok or afternotok and each item a
// Slurm job id (afterok:123:456) or a workload in the pod's namespace (afterany:Job/prep,
// afterany:PodGroup/train, afterany:LeaderWorkerSet/serve/0, afterany:Pod/setup).
//
// Workload references take after or afterany only: kubeslurm ends a placeholder job by
// cancelling it when its pods end, so Slurm records CANCELLED, never COMPLETED, even when
// every pod succeeded; afterok would never be satisfied and afternotok always would be.
func ParseDependency(v string) ([]Dependency, error) {
	if strings.Contains(v, "?") {
		return nil, fmt.Errorf("%q: only \",\" (all of) joins dependencies here, not \"?\" (any of)", v)
	}
	var out []Dependency
	items := 0
	for _, clause := range strings.Split(v, ",") {
		typ, list, ok := strings.Cut(clause, ":")
		switch typ {
		case DependencyAfter, DependencyAfterAny, DependencyAfterOK, DependencyAfterNotOK:
		default:
			return nil, fmt.Errorf("%q: dependency type %q is not one of after, afterany, afterok, afternotok (as afterok:123 or afterany:Job/prep)", v, typ)
		}
		if !ok || list == "" {
			return nil, fmt.Errorf("%q: %s names no job", v, typ)
		}
		d := Dependency{Type: typ}
		for _, item := range strings.Split(list, ":") {
			items++
			if items > maxDependencyItems {
				return nil, fmt.Errorf("%q: more than %d jobs", v, maxDependencyItems)
			}
			if digits.MatchString(item) {
				id, err := strconv.ParseInt(item, 10, 32)
				if err != nil || id < 1 {
					return nil, fmt.Errorf("%q: %q is not a Slurm job id", v, item)
				}
				d.JobIDs = append(d.JobIDs, int32(id))
				continue
			}
			ref, err := parseWorkloadRef(item)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", v, err)
			}
			if typ == DependencyAfterOK || typ == DependencyAfterNotOK {
				return nil, fmt.Errorf("%q: %s cannot name a workload (%s): kubeslurm ends a placeholder job by cancelling it, so Slurm never records it as completed; use afterany (or after)", v, typ, ref)
			}
			d.Workloads = append(d.Workloads, ref)
		}
		out = append(out, d)
	}
	return out, nil
}

func parseWorkloadRef(item string) (WorkloadRef, error) {
	parts := strings.Split(item, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return WorkloadRef{}, fmt.Errorf("%q is neither a job id nor Kind/name", item)
	}
	r := WorkloadRef{Kind: parts[0], Name: parts[1]}
	known := false
	for _, k := range RefKinds {
		known = known || k == r.Kind
	}
	if !known {
		return WorkloadRef{}, fmt.Errorf("%q: kind %q is not one of %s", item, r.Kind, strings.Join(RefKinds, ", "))
	}
	if errs := validation.IsDNS1123Subdomain(r.Name); len(errs) > 0 {
		return WorkloadRef{}, fmt.Errorf("%q: %q is not a name: %s", item, r.Name, strings.Join(errs, "; "))
	}
	if r.Kind == "LeaderWorkerSet" {
		if len(parts) != 3 || !digits.MatchString(parts[2]) || len(parts[2]) > 9 {
			return WorkloadRef{}, fmt.Errorf("%q: a LeaderWorkerSet has one job per group: name it LeaderWorkerSet/<name>/<group index>", item)
		}
		r.Replica = parts[2]
	} else if len(parts) == 3 {
		return WorkloadRef{}, fmt.Errorf("%q: only a LeaderWorkerSet takes a group index", item)
	}
	return r, nil
}

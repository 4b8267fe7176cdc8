package slurmjob

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// The annotation keys (after wellknown.SlurmJobAnnotationPrefix) users may set on a pod.
const (
	AnnotationPartition   = "partition"
	AnnotationAccount     = "account"
	AnnotationQOS         = "qos"
	AnnotationReservation = "reservation"
	AnnotationTimeLimit   = "time-limit"
	AnnotationJobName     = "job-name"
	AnnotationPriority    = "priority"
	AnnotationExclusive   = "exclusive"
	// AnnotationGang on a batch Job makes all its pods one Slurm job (all or nothing).
	AnnotationGang = "gang"
)

// Annotation returns the full annotation key for one of the keys above.
func Annotation(key string) string { return wellknown.SlurmJobAnnotationPrefix + key }

// Options are the job fields users set through annotations.
type Options struct {
	Name, Partition, Account, QOS, Reservation string
	TimeLimitMinutes                           *uint32
	Priority                                   *uint32
	// Exclusive is nil when unset: groups then default to whole nodes, single pods share.
	Exclusive *bool
	// Gang asks for a batch Job's pods to be placed as one Slurm job.
	Gang bool
}

func (o Options) apply(s *JobSpec) {
	if o.Name != "" {
		s.Name = o.Name
	}
	s.Partition, s.Account, s.QOS, s.Reservation = o.Partition, o.Account, o.QOS, o.Reservation
	s.TimeLimitMinutes, s.Priority = o.TimeLimitMinutes, o.Priority
	if o.Exclusive != nil {
		s.Exclusive = *o.Exclusive
	}
}

// Slurm names (partitions, accounts, QOS, reservations) are plain words; job names may
// also carry the separators pod names are made of. Nothing else reaches Slurm, so no
// value can smuggle a newline, a shell metacharacter or a second option into a request.
var (
	slurmName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	jobName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+=-]{0,199}$`)
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

var parsers = map[string]parser{
	AnnotationPartition:   nameField(func(o *Options) *string { return &o.Partition }, slurmName, "partition name"),
	AnnotationAccount:     nameField(func(o *Options) *string { return &o.Account }, slurmName, "account name"),
	AnnotationQOS:         nameField(func(o *Options) *string { return &o.QOS }, slurmName, "QOS name"),
	AnnotationReservation: nameField(func(o *Options) *string { return &o.Reservation }, slurmName, "reservation name"),
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

// ParseAnnotations reads every slurmjob annotation. An unknown key under our prefix is an
// error too: a misspelt "time-limt" must not be silently ignored.
func ParseAnnotations(annotations map[string]string) (Options, error) {
	var o Options
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		if strings.HasPrefix(k, wellknown.SlurmJobAnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys) // report the same first error every time
	for _, k := range keys {
		v := annotations[k]
		name := strings.TrimPrefix(k, wellknown.SlurmJobAnnotationPrefix)
		p, ok := parsers[name]
		if !ok {
			return Options{}, &AnnotationError{Key: k, Value: v, Err: fmt.Errorf("unknown key; known keys: %s", strings.Join(KnownKeys(), ", "))}
		}
		if err := p(strings.TrimSpace(v), &o); err != nil {
			return Options{}, &AnnotationError{Key: k, Value: v, Err: err}
		}
	}
	return o, nil
}

// KnownKeys lists the annotation keys (without prefix), sorted.
func KnownKeys() []string {
	out := make([]string, 0, len(parsers))
	for k := range parsers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
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

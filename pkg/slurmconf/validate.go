package slurmconf

import (
	"fmt"
	"iter"
	"regexp"
	"strings"
)

// Reserved keys of slurm.conf: kubeslurm writes them from the spec (or relies on their
// value: paths of mounted keys and state, the daemons' users), so extra config may not set
// them. Compared case-insensitively, as Slurm does.
var reservedSlurmConf = keySet(
	"ClusterName", "SlurmctldHost", "ControlMachine", "ControlAddr", "BackupController", "BackupAddr",
	"SlurmctldPort", "SlurmctldParameters", "SlurmctldPidFile", "StateSaveLocation",
	"SlurmUser", "SlurmdUser", "SlurmdSpoolDir", "SlurmdPidFile",
	"AuthType", "AuthAltTypes", "AuthAltParameters", "AuthInfo", "CredType",
	"MaxNodeCount", "ProctrackType", "TaskPlugin",
	"AccountingStorageType", "AccountingStorageHost", "AccountingStorageBackupHost",
	"AccountingStoragePort", "AccountingStorageUser", "AccountingStoragePass",
	"PartitionName", "NodeSet",
	// Include would read any file of the daemon's filesystem into the configuration.
	"Include",
)

// Reserved keys of slurmdbd.conf: those kubeslurm writes, the password its pod adds, and
// PluginDir (the plugins slurmdbd loads). Include as in slurm.conf.
var reservedSlurmdbdConf = keySet(
	"AuthType", "AuthAltTypes", "AuthAltParameters", "AuthInfo",
	"DbdHost", "DbdAddr", "DbdPort", "DbdBackupHost", "SlurmUser", "PidFile", "PluginDir",
	"StorageType", "StorageHost", "StoragePort", "StorageUser", "StoragePass", "StorageLoc",
	"Include",
)

// Reserved keys of cgroup.conf.
var reservedCgroupConf = keySet("CgroupPlugin", "IgnoreSystemd", "Include")

func keySet(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[strings.ToLower(k)] = true
	}
	return m
}

// keyRE is a Slurm parameter name.
var keyRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)

// ValidateValue checks one value written after `Key=`: it must stay that one value. It may
// not be empty, hold whitespace (which would start another Key=Value), a comment (#), a
// quote or backslash (Slurm's quoting and line continuation), or any control character.
func ValidateValue(v string) error {
	if v == "" {
		return fmt.Errorf("empty value")
	}
	for _, r := range v {
		switch {
		case r == '#':
			return fmt.Errorf("value %q holds '#', which starts a comment in Slurm's files", v)
		case r == '"' || r == '\'' || r == '\\':
			return fmt.Errorf("value %q holds %q: quoting and escapes are not accepted", v, r)
		case r == ' ' || r == '\t':
			return fmt.Errorf("value %q holds whitespace, which would start another parameter", v)
		case r < 0x20 || r == 0x7f || r == 0x85 || r == 0x2028 || r == 0x2029:
			return fmt.Errorf("value %q holds control character %U", v, r)
		}
	}
	return nil
}

// ValidateKey checks a parameter name that kubeslurm writes a user's value under (a
// partition option): a plain name and not one kubeslurm sets itself.
func validateKey(k string, reserved map[string]bool) error {
	if !keyRE.MatchString(k) {
		return fmt.Errorf("%q is not a parameter name", k)
	}
	if reserved[strings.ToLower(k)] {
		return fmt.Errorf("%s is set by kubeslurm and cannot be overridden", k)
	}
	return nil
}

// ValidateExtra checks user lines for slurm.conf (reserved: the keys kubeslurm owns).
func ValidateExtra(text string) error { return validateLines(text, reservedSlurmConf) }

// ValidateCgroupExtra checks user lines for cgroup.conf.
func ValidateCgroupExtra(text string) error { return validateLines(text, reservedCgroupConf) }

// validateLines checks extra configuration: each non-blank line is one or more
// whitespace-separated Key=Value parameters (Slurm reads several on a line, so every one is
// checked against the reserved keys) or a whole-line comment. Errors name the line.
func validateLines(text string, reserved map[string]bool) error {
	if strings.ContainsRune(text, 0) {
		return fmt.Errorf("extra config holds a NUL byte")
	}
	if strings.ContainsAny(text, "\r\v\f\u0085\u2028\u2029") {
		return fmt.Errorf("extra config holds a line break other than \\n")
	}
	for _, r := range text {
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f {
			return fmt.Errorf("extra config holds control character %U", r)
		}
	}
	for i, line := range settingLines(text) {
		if err := validateLine(line, reserved); err != nil {
			return fmt.Errorf("extra config line %d: %w", i+1, err)
		}
	}
	return nil
}

// settingLines yields the lines of extra configuration that hold settings, trimmed, with
// their index: not blank lines, nor whole-line comments (a comment ending in a backslash
// would continue onto the next line, so it counts as a setting line and fails validation).
func settingLines(text string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		for i, line := range strings.Split(text, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") && !strings.HasSuffix(line, "\\") {
				continue
			}
			if !yield(i, line) {
				return
			}
		}
	}
}

// setsAnyKey: some Key=Value of the extra configuration text (as validateLines reads it)
// has one of keys (lower case, as keySet makes them).
func setsAnyKey(text string, keys map[string]bool) bool {
	for _, line := range settingLines(text) {
		for _, tok := range strings.Fields(line) {
			if k, _, ok := strings.Cut(tok, "="); ok && keys[strings.ToLower(k)] {
				return true
			}
		}
	}
	return false
}

func validateLine(line string, reserved map[string]bool) error {
	for _, tok := range strings.Fields(line) {
		k, v, ok := strings.Cut(tok, "=")
		if !ok {
			return fmt.Errorf("%q is not Key=Value", tok)
		}
		if err := validateKey(k, reserved); err != nil {
			return err
		}
		if err := ValidateValue(v); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

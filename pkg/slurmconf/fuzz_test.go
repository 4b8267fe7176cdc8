package slurmconf

import (
	"strings"
	"testing"
)

// Whatever ValidateExtra accepts, appended to slurm.conf, is read by Slurm as lines of
// Key=Value parameters none of which is a key of ours: no line break but \n, no
// continuation, no quote, and each parameter's key (before its first '=') is not reserved.
// `go test` runs the seeds; `go test -fuzz FuzzValidateExtra ./pkg/slurmconf/` explores.
func FuzzValidateExtra(f *testing.F) {
	for _, seed := range []string{
		"SchedulerParameters=bf_interval=60", "A=b C=d\nE=f", "# c\nA=b", "A=b\rAuthType=x",
		"A=b AuthType=x", "A=\"b AuthType=x\"", "A=b\\\nAuthType=x", "A=b#\nAuthType=x", "aUtHtYpE=x",
		"A=b\x00", "Include x", "\tA=b\t", "A=b\u2028AuthType=x", "# x \\\nAuthType=x",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if ValidateExtra(text) != nil {
			return
		}
		for _, r := range text {
			if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || r == 0x85 || r == 0x2028 || r == 0x2029 {
				t.Fatalf("accepted %q with control character or line break %U", text, r)
			}
		}
		for _, line := range strings.Split(text, "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "#") {
				if strings.HasSuffix(line, "\\") {
					t.Fatalf("accepted a continued comment in %q", text)
				}
				continue
			}
			if strings.ContainsAny(line, "\\#\"'") {
				t.Fatalf("accepted an escape, quote or comment inside %q", line)
			}
			for _, tok := range strings.Fields(line) {
				k, _, ok := strings.Cut(tok, "=")
				if !ok || reservedSlurmConf[strings.ToLower(k)] {
					t.Fatalf("accepted parameter %q in %q", tok, text)
				}
			}
		}
	})
}

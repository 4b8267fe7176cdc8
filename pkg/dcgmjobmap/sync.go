package dcgmjobmap

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	// LockFile is the file in the mapping directory the scripts flock (exec 9>"$DIR/.lock").
	LockFile = ".lock"
	// StateFile, in the mapping directory, lists the lines the job mapping agent wrote, as
	// "<gpu> <job id>" lines: the agent removes only those, never a prolog's. dcgm-exporter
	// reads only the files named by a number.
	StateFile = ".kubeslurm-agent"
)

// Mapping is GPU index -> ids of the jobs using that GPU.
type Mapping map[int][]int

// Sync makes the agent's lines in the mapping directory dir say want: the job ids of want
// are added to the files of their GPUs, and the ids the agent wrote before (StateFile) and
// that want no longer has are taken out. Lines the agent did not write (the prolog's, for
// sbatch jobs) stay. A file no job is left in is removed, as the epilog does. It holds the
// scripts' lock throughout, and replaces every file whole (temp file + rename).
func Sync(dir string, want Mapping) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close() // releases the flock
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	owned, err := readState(dir)
	if err != nil {
		return err
	}
	type change struct {
		path  string
		lines []string
	}
	var changes []change
	next := Mapping{}
	for _, gpu := range slices.Sorted(maps.Keys(union(owned, want))) {
		path := filepath.Join(dir, strconv.Itoa(gpu))
		lines, err := readLines(path)
		if err != nil {
			return err
		}
		newLines, mine := merge(lines, owned[gpu], want[gpu])
		if len(mine) > 0 {
			next[gpu] = mine
		}
		if !slices.Equal(lines, newLines) {
			changes = append(changes, change{path, newLines})
		}
	}
	// Claim the lines about to be added before adding them: after a crash in between, the
	// state names a line too many (harmless), never one too few (a line nobody removes).
	if err := writeState(dir, union(owned, next)); err != nil {
		return err
	}
	for _, c := range changes {
		if len(c.lines) == 0 {
			if err := os.Remove(c.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			continue
		}
		if err := writeFile(c.path, []byte(strings.Join(c.lines, "\n")+"\n")); err != nil {
			return err
		}
	}
	return writeState(dir, next)
}

// merge is a GPU file's new lines: lines without the ids the agent wrote (owned) that want
// no longer has, and with those of want it lacks (at the end, as the prolog adds them).
// mine is the ids of want the agent now owns in it: those it added or owned already, not
// one someone else wrote.
func merge(lines []string, owned, want []int) (newLines []string, mine []int) {
	isWanted := map[string]bool{}
	for _, id := range want {
		isWanted[strconv.Itoa(id)] = true
	}
	isOwned := map[string]bool{}
	for _, id := range owned {
		isOwned[strconv.Itoa(id)] = true
	}
	present := map[string]bool{}
	for _, l := range lines {
		if isOwned[l] && !isWanted[l] {
			continue
		}
		newLines = append(newLines, l)
		present[l] = true
	}
	for _, id := range slices.Sorted(slices.Values(want)) {
		s := strconv.Itoa(id)
		switch {
		case !present[s]:
			newLines = append(newLines, s)
			present[s] = true
			mine = append(mine, id)
		case isOwned[s] && !slices.Contains(mine, id):
			mine = append(mine, id)
		}
	}
	return newLines, mine
}

func union(a, b Mapping) Mapping {
	out := Mapping{}
	for _, m := range []Mapping{a, b} {
		for gpu, ids := range m {
			for _, id := range ids {
				if !slices.Contains(out[gpu], id) {
					out[gpu] = append(out[gpu], id)
				}
			}
		}
	}
	return out
}

// readLines is a file's lines (none when it does not exist).
func readLines(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil, nil
	}
	return strings.Split(s, "\n"), nil
}

func readState(dir string) (Mapping, error) {
	path := filepath.Join(dir, StateFile)
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	m := Mapping{}
	for n, l := range lines {
		f := strings.Fields(l)
		var gpu, id int
		if len(f) == 2 {
			gpu, err = strconv.Atoi(f[0])
			if err == nil {
				id, err = strconv.Atoi(f[1])
			}
		}
		if len(f) != 2 || err != nil || gpu < 0 || id <= 0 {
			// Fail closed: without knowing its own lines the agent could remove a prolog's.
			return nil, fmt.Errorf("%s line %d: %q is no \"<gpu> <job id>\"; fix or remove the file (the agent then re-adds its lines, and the ones it wrote before stay until removed by hand)", path, n+1, l)
		}
		m[gpu] = append(m[gpu], id)
	}
	return m, nil
}

func writeState(dir string, m Mapping) error {
	path := filepath.Join(dir, StateFile)
	if len(m) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	var b strings.Builder
	for _, gpu := range slices.Sorted(maps.Keys(m)) {
		for _, id := range slices.Sorted(slices.Values(m[gpu])) {
			fmt.Fprintf(&b, "%d %d\n", gpu, id)
		}
	}
	return writeFile(path, []byte(b.String()))
}

// writeFile replaces path whole: dcgm-exporter never reads half a file.
func writeFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // gone after the rename; left only on error
	if _, err := f.Write(data); err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(f.Name(), path)
}

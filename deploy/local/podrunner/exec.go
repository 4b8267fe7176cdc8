package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// The container's process is started as `kubeslurm-podrunner exec [--root DIR]
// [--hostname NAME] [--bind SRC:DST[:ro]]... [--gpus MINOR,...] [--user UID:GID[:G1,G2...]]
// [--dir DIR] -- PROGRAM ARGS...` in a new mount namespace (Go makes its mounts private: nothing reaches
// the host's), and a UTS namespace of its own when it has a hostname. It bind-mounts the
// pod's volumes where the container mounts them (inside DIR, with /proc, /dev and /sys,
// and chroots there when there is a root; with --gpus, fake NVIDIA GPUs in it: gpus.go), drops to the pod's user and execs PROGRAM, so
// the process sees /var/run/secrets/kubernetes.io/serviceaccount and the like as in a pod.

type bind struct {
	Src, Dst string
	RO       bool
}

func (b bind) String() string {
	s := b.Src + ":" + b.Dst
	if b.RO {
		s += ":ro"
	}
	return s
}

func parseBind(s string) (bind, error) {
	f := strings.Split(s, ":")
	switch {
	case len(f) == 2:
		return bind{Src: f[0], Dst: f[1]}, nil
	case len(f) == 3 && f[2] == "ro":
		return bind{Src: f[0], Dst: f[1], RO: true}, nil
	}
	return bind{}, fmt.Errorf("--bind %q: want SRC:DST[:ro]", s)
}

type user struct {
	UID, GID uint32
	Groups   []uint32
}

func (u user) String() string {
	s := fmt.Sprintf("%d:%d", u.UID, u.GID)
	if len(u.Groups) > 0 {
		g := make([]string, len(u.Groups))
		for i, id := range u.Groups {
			g[i] = strconv.FormatUint(uint64(id), 10)
		}
		s += ":" + strings.Join(g, ",")
	}
	return s
}

func parseUser(s string) (*user, error) {
	f := strings.Split(s, ":")
	if len(f) < 2 || len(f) > 3 {
		return nil, fmt.Errorf("--user %q: want UID:GID[:G1,G2...]", s)
	}
	parts := []string{f[0], f[1]}
	if len(f) == 3 && f[2] != "" {
		parts = append(parts, strings.Split(f[2], ",")...)
	}
	ids := make([]uint32, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--user %q: %w", s, err)
		}
		ids[i] = uint32(n)
	}
	return &user{UID: ids[0], GID: ids[1], Groups: ids[2:]}, nil
}

// execMain is the `exec` subcommand; it returns only on failure.
func execMain(args []string) error {
	var binds []bind
	var u *user
	var gpus []int
	dir, root, hostname := "/", "", ""
	for len(args) > 0 && args[0] != "--" {
		if len(args) < 2 {
			return fmt.Errorf("exec: %s needs a value", args[0])
		}
		var err error
		switch args[0] {
		case "--bind":
			var b bind
			b, err = parseBind(args[1])
			binds = append(binds, b)
		case "--user":
			u, err = parseUser(args[1])
		case "--dir":
			dir = args[1]
		case "--root":
			root = args[1]
		case "--hostname":
			hostname = args[1]
		case "--gpus":
			gpus, err = parseMinors(args[1])
		default:
			err = fmt.Errorf("exec: unknown option %s", args[0])
		}
		if err != nil {
			return err
		}
		args = args[2:]
	}
	if len(args) < 2 {
		return fmt.Errorf("exec: no program after --")
	}
	if root != "" {
		// A container's /run and /tmp are its own: the Slurm root is shared by every
		// container (and the local cluster's daemons), whose sockets there (sackd's
		// sack.socket above all) must not be found by another pod's processes.
		for _, d := range []struct {
			path string
			mode string
		}{{"/run", "0755"}, {"/tmp", "1777"}} {
			if err := unix.Mount("tmpfs", filepath.Join(root, d.path), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode="+d.mode); err != nil {
				return fmt.Errorf("tmpfs on %s: %w", d.path, err)
			}
		}
		// The image's filesystem: the kernel's file systems first, then the volumes in it.
		sys := []bind{{Src: "/proc", Dst: "/proc"}, {Src: "/dev", Dst: "/dev"}, {Src: "/sys", Dst: "/sys"}}
		binds = append(sys, binds...)
		for i := range binds {
			// Resolved inside the root: a symbolic link on the path there (the root's
			// /var/run is one, to /run) names a place in the root, not on the host.
			dst, err := securejoin.SecureJoin(root, binds[i].Dst)
			if err != nil {
				return fmt.Errorf("mount point %s in %s: %w", binds[i].Dst, root, err)
			}
			binds[i].Dst = dst
		}
	}
	for _, b := range binds {
		if err := mountBind(b); err != nil {
			return err
		}
	}
	if len(gpus) > 0 {
		if root == "" {
			return fmt.Errorf("exec: --gpus needs --root (a /dev and /proc of the container's own)")
		}
		if err := mountFakeGPUs(root, gpus); err != nil {
			return err
		}
	}
	if hostname != "" {
		if err := unix.Sethostname([]byte(hostname)); err != nil {
			return fmt.Errorf("sethostname %s: %w", hostname, err)
		}
	}
	if root != "" {
		if err := unix.Chroot(root); err != nil {
			return fmt.Errorf("chroot %s: %w", root, err)
		}
	}
	// Opened while still root: the program's directories may be closed to the container's
	// user (a checkout in a mode-0700 directory), which a kubelet's image never is.
	prog, _ := os.Open(args[1])
	if u != nil {
		// Go applies these to every thread of the process.
		if err := syscall.Setgroups(intIDs(u.Groups)); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setgid(int(u.GID)); err != nil {
			return fmt.Errorf("setgid: %w", err)
		}
		if err := syscall.Setuid(int(u.UID)); err != nil {
			return fmt.Errorf("setuid: %w", err)
		}
	}
	if err := os.Chdir(dir); err != nil {
		return err
	}
	err := syscall.Exec(args[1], args[1:], os.Environ())
	if errors.Is(err, syscall.EACCES) && prog != nil {
		// The file root opened, by its descriptor: no directory on its path is searched.
		err = syscall.Exec(fmt.Sprintf("/proc/self/fd/%d", prog.Fd()), args[1:], os.Environ())
	}
	return err
}

func intIDs(ids []uint32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

// mountBind bind-mounts b.Src on b.Dst, making the mount point (a directory, or an empty
// file for a file) when it is missing: mount points made on the host stay there, empty.
func mountBind(b bind) error {
	st, err := os.Stat(b.Src)
	if err != nil {
		return err
	}
	if st.IsDir() {
		err = os.MkdirAll(b.Dst, 0o755)
	} else if _, err = os.Stat(b.Dst); os.IsNotExist(err) {
		if err = os.MkdirAll(filepath.Dir(b.Dst), 0o755); err == nil {
			var f *os.File
			if f, err = os.OpenFile(b.Dst, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				err = f.Close()
			}
		}
	}
	if err != nil {
		return fmt.Errorf("mount point %s: %w", b.Dst, err)
	}
	if err := unix.Mount(b.Src, b.Dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", b.Src, b.Dst, err)
	}
	if b.RO {
		if err := unix.Mount("", b.Dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("read-only %s: %w", b.Dst, err)
		}
	}
	return nil
}

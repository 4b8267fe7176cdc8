package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/kubeslurm/kubeslurm/deploy/local/mountns"
)

// podRun is one pod bound to the runner's node while it runs: its volumes on disk, one
// process per container, and the status last reported.
type podRun struct {
	r      *runner
	pod    *v1.Pod // as it was when started (the spec of a pod does not change)
	uid    types.UID
	dir    string
	cancel context.CancelFunc
	done   chan struct{}

	// grace is the deletion's grace period once the pod is deleted (nanoseconds, -1
	// before): a delete with a shorter one, as a kubelet honours, shortens the wait.
	grace atomic.Int64

	prepared   bool
	files      map[string]map[string]bool // per volume, the files syncFiles wrote
	refreshed  time.Time                  // when the volumes were last refreshed
	startedAt  metav1.Time
	containers []*container
	reported   *v1.PodStatus
	// exits wakes the pod's loop when a container's main process exits, so its end is
	// reported at once rather than at the next tick.
	exits chan struct{}
}

type container struct {
	spec      v1.Container
	proc      *exec.Cmd
	mountNS   *mountns.Namespace // held from its start until all of the container's processes are killed
	exited    chan struct{}
	exitCode  int
	startedAt metav1.Time
	ready     bool
	restarts  int32
	lastTerm  *v1.ContainerStateTerminated
	waiting   *v1.ContainerStateWaiting
	nextStart time.Time
	// probe bookkeeping
	readyFails, liveFails int
	nextReady, nextLive   time.Time
}

// volumeRefreshPeriod is how often a running pod's ConfigMap and Secret volumes are
// brought up to date (a kubelet's sync takes up to a minute or so; shorter here, for tests).
const volumeRefreshPeriod = 5 * time.Second

// startPodRun starts running pod until ctx ends or stop is called.
func startPodRun(ctx context.Context, r *runner, pod *v1.Pod) *podRun {
	ctx, cancel := context.WithCancel(ctx)
	pr := &podRun{r: r, pod: pod.DeepCopy(), uid: pod.UID, done: make(chan struct{}), cancel: cancel,
		dir: filepath.Join(r.stateDir, "pods", string(pod.UID)), exits: make(chan struct{}, 1)}
	pr.grace.Store(-1)
	for _, c := range pod.Spec.Containers {
		pr.containers = append(pr.containers, resumedContainer(pod, c))
	}
	go pr.run(ctx)
	return pr
}

// resumedContainer is container c of pod as the runner takes it up. One that a runner
// before it ran (its status says so: a runner started again after it was killed, as a
// machine's reboot ends a kubelet) ended with that runner, and its next start is a restart:
// its restart count goes on from the status, with that end as its last termination (exit
// code 255, reason Unknown, as a kubelet reports a container lost in a reboot), and one that
// had ended keeps its end, so the restart policy decides as before: a pod that never
// restarts (restartPolicy Never) keeps the lost run as its container's end and fails.
func resumedContainer(pod *v1.Pod, c v1.Container) *container {
	out := &container{spec: c, waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != c.Name {
			continue
		}
		switch {
		case cs.State.Running != nil:
			out.lastTerm = &v1.ContainerStateTerminated{ExitCode: 255, Reason: "Unknown", Message: "the pod runner that ran it stopped",
				StartedAt: cs.State.Running.StartedAt, FinishedAt: metav1.Now(), ContainerID: cs.ContainerID}
			if pod.Spec.RestartPolicy == v1.RestartPolicyNever {
				out.waiting = nil // terminated for good
			}
		case cs.State.Terminated != nil:
			out.lastTerm, out.waiting = cs.State.Terminated.DeepCopy(), nil
		case cs.LastTerminationState.Terminated != nil: // waiting to restart
			out.lastTerm = cs.LastTerminationState.Terminated.DeepCopy()
		default:
			continue
		}
		out.restarts = cs.RestartCount
	}
	return out
}

// stop asks the pod's processes to end (SIGTERM, the grace period, SIGKILL) and reports
// whether they have. It does not wait: a pod with a long grace period (a slurmd worker
// draining its node) must not hold up the other pods.
func (pr *podRun) stop() bool {
	pr.cancel()
	select {
	case <-pr.done:
		return true
	default:
		return false
	}
}

func (pr *podRun) run(ctx context.Context) {
	defer close(pr.done)
	defer pr.killAll()
	pr.endLeftRunning()
	pr.startedAt = metav1.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		pr.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-pr.exits:
		}
	}
}

// step: volumes until they are ready, then (re)start containers by the restart policy,
// probe, and report the status when it changed.
func (pr *podRun) step(ctx context.Context) {
	if !pr.prepared {
		if err := pr.prepareVolumes(ctx); err != nil {
			for _, c := range pr.containers {
				c.waiting = &v1.ContainerStateWaiting{Reason: "ContainerCreating", Message: err.Error()}
			}
			klog.V(2).InfoS("volumes not ready", "pod", klog.KObj(pr.pod), "err", err)
		} else {
			pr.prepared, pr.refreshed = true, time.Now()
		}
	}
	now := time.Now()
	if pr.prepared && now.Sub(pr.refreshed) >= volumeRefreshPeriod {
		pr.refreshVolumes(ctx)
		pr.refreshed = now
	}
	for _, c := range pr.containers {
		if c.proc != nil {
			select {
			case <-c.exited:
				pr.ended(c, now)
			default:
			}
		}
		if pr.prepared && c.proc == nil && pr.shouldStart(c) && !now.Before(c.nextStart) {
			if err := pr.start(c); err != nil {
				c.waiting = &v1.ContainerStateWaiting{Reason: "CreateContainerError", Message: err.Error()}
				c.nextStart = now.Add(10 * time.Second)
			}
		}
		if c.proc != nil {
			pr.probe(c, now)
		}
	}
	pr.report(ctx)
}

func (pr *podRun) shouldStart(c *container) bool {
	if c.lastTerm == nil {
		return true
	}
	switch pr.pod.Spec.RestartPolicy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return c.lastTerm.ExitCode != 0
	}
	return true
}

func (pr *podRun) ended(c *container, now time.Time) {
	reason := "Completed"
	if c.exitCode != 0 {
		reason = "Error"
	}
	c.lastTerm = &v1.ContainerStateTerminated{ExitCode: int32(c.exitCode), Reason: reason,
		StartedAt: c.startedAt, FinishedAt: metav1.NewTime(now), ContainerID: containerID(c.proc)}
	// As a kubelet: FallbackToLogsOnError makes the end of a failed run's log the message
	// (there is no terminationMessagePath file to read first).
	if c.exitCode != 0 && c.spec.TerminationMessagePolicy == v1.TerminationMessageFallbackToLogsOnError {
		msg, err := logTail(pr.logPath(c), maxTerminationLogLines, maxTerminationLogBytes)
		if err != nil {
			klog.ErrorS(err, "reading the log for the termination message", "pod", klog.KObj(pr.pod), "container", c.spec.Name)
		}
		c.lastTerm.Message = msg
	}
	klog.InfoS("container exited", "pod", klog.KObj(pr.pod), "container", c.spec.Name, "exitCode", c.exitCode)
	pr.killLeftovers(c)
	c.proc, c.ready = nil, false
	if pr.shouldStart(c) {
		// Back off as a kubelet does: 10 s, doubling, at most 5 min.
		backoff := 10 * time.Second << min(c.restarts, 5)
		c.nextStart = now.Add(min(backoff, 5*time.Minute))
		c.waiting = &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container", backoff)}
	}
}

func containerID(p *exec.Cmd) string {
	if p == nil || p.Process == nil {
		return ""
	}
	return containerIDPrefix + strconv.Itoa(p.Process.Pid)
}

// start runs container c: `kubeslurm-podrunner exec` in a new mount namespace, which mounts
// the volumes, drops to the pod's user and execs the image's program.
func (pr *podRun) start(c *container) error {
	cmdline, err := commandLine(pr.r.binDir, &c.spec)
	if err != nil {
		return err
	}
	env, err := pr.env(&c.spec)
	if err != nil {
		return err
	}
	args := []string{"exec"}
	flags := uintptr(syscall.CLONE_NEWNS)
	if im, _ := lookupImage(c.spec.Image); im.SlurmRoot {
		if pr.r.slurmRoot == "" {
			return fmt.Errorf("image %s runs in the Slurm root filesystem: start the runner with --slurm-root", c.spec.Image)
		}
		hosts, err := pr.writeHosts()
		if err != nil {
			return err
		}
		// A UTS namespace for the pod's hostname: Slurm daemons find their node and
		// SlurmctldHost entry by it.
		flags |= syscall.CLONE_NEWUTS
		args = append(args, "--root", pr.r.slurmRoot, "--hostname", podHostname(pr.pod),
			"--bind", bind{Src: hosts, Dst: "/etc/hosts", RO: true}.String())
		gpus, err := pr.gpus(&c.spec)
		if err != nil {
			return err
		}
		if len(gpus) > 0 {
			args = append(args, "--gpus", formatMinors(gpus))
		}
	}
	for _, m := range c.spec.VolumeMounts {
		args = append(args, "--bind", bind{Src: filepath.Join(pr.volumeDir(m.Name), m.SubPath), Dst: m.MountPath, RO: m.ReadOnly}.String())
	}
	args = append(args, "--user", pr.user(&c.spec).String())
	if c.spec.WorkingDir != "" {
		args = append(args, "--dir", c.spec.WorkingDir)
	}
	args = append(append(args, "--"), cmdline...)
	if err := os.MkdirAll(filepath.Dir(pr.logPath(c)), 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(pr.logPath(c), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "%s%s: starting %v\n", runHeader, time.Now().Format(time.RFC3339), cmdline)
	cmd := exec.Command(pr.r.self, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, log, log
	// CLONE_NEWNS: Go also makes every mount of the new namespace private.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: flags, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	if c.lastTerm != nil {
		c.restarts++
	}
	// Start returns once the child has exec'd, so after its unshare: the namespace is its
	// own; and the child is not waited for yet, so its pid is still its own.
	c.mountNS, err = mountns.Open(cmd.Process.Pid)
	if err != nil {
		klog.ErrorS(err, "reading the container's mount namespace: its leftovers will not be ended", "pod", klog.KObj(pr.pod), "container", c.spec.Name)
	}
	c.proc, c.exited, c.startedAt, c.waiting, c.ready = cmd, make(chan struct{}), metav1.Now(), nil, false
	c.readyFails, c.liveFails = 0, 0
	c.nextReady, c.nextLive = probeStart(c.spec.ReadinessProbe), probeStart(c.spec.LivenessProbe)
	exited := c.exited
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			c.exitCode = 0
		case errors.As(err, &ee):
			c.exitCode = ee.ExitCode()
			if c.exitCode < 0 {
				c.exitCode = 137 // killed by a signal
			}
		default:
			c.exitCode = 128
		}
		close(exited)
		select {
		case pr.exits <- struct{}{}:
		default: // a wake-up is pending already
		}
	}()
	klog.InfoS("container started", "pod", klog.KObj(pr.pod), "container", c.spec.Name, "pid", cmd.Process.Pid, "command", cmdline)
	return nil
}

// logPath is the file container c's runs log to, one after the other, each after a
// runHeader line.
func (pr *podRun) logPath(c *container) string {
	return filepath.Join(pr.r.stateDir, "logs", fmt.Sprintf("%s_%s_%s.log", pr.pod.Namespace, pr.pod.Name, c.spec.Name))
}

// user is the container's uid:gid (security context, else the images' user 65532, as
// their Dockerfiles set) with the pod's fsGroup and supplemental groups.
func (pr *podRun) user(c *v1.Container) user {
	u := user{UID: 65532, GID: 65532}
	if psc := pr.pod.Spec.SecurityContext; psc != nil {
		if psc.RunAsUser != nil {
			u.UID = uint32(*psc.RunAsUser)
		}
		if psc.RunAsGroup != nil {
			u.GID = uint32(*psc.RunAsGroup)
		}
		if psc.FSGroup != nil {
			u.Groups = append(u.Groups, uint32(*psc.FSGroup))
		}
		for _, g := range psc.SupplementalGroups {
			u.Groups = append(u.Groups, uint32(g))
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			u.UID = uint32(*sc.RunAsUser)
		}
		if sc.RunAsGroup != nil {
			u.GID = uint32(*sc.RunAsGroup)
		}
	}
	return u
}

// env is the container's environment: what a pod's process finds (the API server's
// address, HOSTNAME) and the container's own variables (values and pod fields).
func (pr *podRun) env(c *v1.Container) ([]string, error) {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME=" + pr.pod.Name,
		"KUBERNETES_SERVICE_HOST=" + pr.r.apiHost, "KUBERNETES_SERVICE_PORT=" + pr.r.apiPort,
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				return nil, fmt.Errorf("env %s: only values and fieldRef are supported", e.Name)
			}
			var err error
			if v, err = pr.field(e.ValueFrom.FieldRef.FieldPath); err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return env, nil
}

func (pr *podRun) field(path string) (string, error) {
	p := pr.pod
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "spec.nodeName":
		return pr.r.node, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.podIP", "status.hostIP":
		return "127.0.0.1", nil
	}
	return "", fmt.Errorf("field %s is not supported", path)
}

func probeStart(p *v1.Probe) time.Time {
	if p == nil {
		return time.Time{}
	}
	return time.Now().Add(time.Duration(p.InitialDelaySeconds) * time.Second)
}

// probe runs the readiness and liveness probes that are due. No readiness probe: ready
// while running. A liveness probe failing failureThreshold times in a row kills the
// process (the restart policy then applies).
func (pr *podRun) probe(c *container, now time.Time) {
	if p := c.spec.ReadinessProbe; p == nil {
		c.ready = true
	} else if !now.Before(c.nextReady) {
		c.nextReady = now.Add(period(p))
		if err := pr.check(c, p); err != nil {
			c.readyFails++
			if c.readyFails >= int(threshold(p.FailureThreshold, 3)) {
				c.ready = false
			}
			klog.V(2).InfoS("readiness probe failed", "pod", klog.KObj(pr.pod), "container", c.spec.Name, "err", err)
		} else {
			c.readyFails, c.ready = 0, true
		}
	}
	if p := c.spec.LivenessProbe; p != nil && !now.Before(c.nextLive) {
		c.nextLive = now.Add(period(p))
		if err := pr.check(c, p); err != nil {
			c.liveFails++
			if c.liveFails >= int(threshold(p.FailureThreshold, 3)) {
				klog.InfoS("liveness probe failed: killing", "pod", klog.KObj(pr.pod), "container", c.spec.Name, "err", err)
				_ = syscall.Kill(-c.proc.Process.Pid, syscall.SIGKILL)
			}
		} else {
			c.liveFails = 0
		}
	}
}

func period(p *v1.Probe) time.Duration {
	return time.Duration(threshold(p.PeriodSeconds, 10)) * time.Second
}

func threshold(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}

// check runs one httpGet or tcpSocket probe against the host's loopback.
func (pr *podRun) check(c *container, p *v1.Probe) error {
	timeout := time.Duration(threshold(p.TimeoutSeconds, 1)) * time.Second
	switch {
	case p.HTTPGet != nil:
		port, err := portOf(&c.spec, p.HTTPGet.Port)
		if err != nil {
			return err
		}
		host := p.HTTPGet.Host
		if host == "" {
			host = "127.0.0.1"
		}
		scheme := "http"
		if p.HTTPGet.Scheme == v1.URISchemeHTTPS {
			scheme = "https"
		}
		client := &http.Client{Timeout: timeout, Transport: &http.Transport{
			// As a kubelet: the certificate is not checked.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
		}}
		resp, err := client.Get(fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), p.HTTPGet.Path))
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	case p.TCPSocket != nil:
		port, err := portOf(&c.spec, p.TCPSocket.Port)
		if err != nil {
			return err
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), timeout)
		if err != nil {
			return err
		}
		return conn.Close()
	case p.Exec != nil:
		return pr.execProbe(c, p.Exec.Command, timeout)
	}
	return fmt.Errorf("only httpGet, tcpSocket and exec probes are supported")
}

// execProbe runs command in the container as a kubelet's exec probe does: in its mount and
// UTS namespaces, root and working directory (nsenter on its main process), as its user,
// with its environment. Exit 0 passes.
func (pr *podRun) execProbe(c *container, command []string, timeout time.Duration) error {
	if len(command) == 0 {
		return fmt.Errorf("exec probe without a command")
	}
	if c.proc == nil || c.proc.Process == nil {
		return fmt.Errorf("container not running")
	}
	env, err := pr.env(&c.spec)
	if err != nil {
		return err
	}
	u := pr.user(&c.spec)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := append([]string{"--target", strconv.Itoa(c.proc.Process.Pid), "--mount", "--uts", "--root", "--wd",
		"--setuid", strconv.Itoa(int(u.UID)), "--setgid", strconv.Itoa(int(u.GID)), "--"}, command...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("exec probe %v: %w: %s", command, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func portOf(c *v1.Container, p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("no container port named %s", p.StrVal)
}

// killAll stops the pod as a kubelet does: SIGTERM to each container's main process (its
// PID 1), SIGKILL to everything of the container (its mount namespace) after the grace
// period, or once the main process has exited (a container's leftovers die with it).
func (pr *podRun) killAll() {
	for _, c := range pr.containers {
		if c.proc != nil {
			_ = c.proc.Process.Signal(syscall.SIGTERM)
		}
	}
	start := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for _, c := range pr.containers {
		if c.proc == nil {
			continue
		}
	wait:
		for {
			select {
			case <-c.exited:
				break wait
			case <-tick.C:
				if time.Since(start) >= pr.gracePeriod() {
					break wait
				}
			}
		}
		// The rest of its process group too (and the container itself past the grace),
		// then whatever left the group (a job step in a session of its own).
		_ = syscall.Kill(-c.proc.Process.Pid, syscall.SIGKILL)
		<-c.exited
		pr.killLeftovers(c)
		klog.InfoS("container stopped", "pod", klog.KObj(pr.pod), "container", c.spec.Name)
	}
}

// killLeftovers ends what is left of container c's processes once its main process has
// gone, as a container's processes end with it.
func (pr *podRun) killLeftovers(c *container) {
	if c.mountNS == nil {
		return
	}
	if err := c.mountNS.Kill(); err != nil {
		klog.ErrorS(err, "ending the container's leftover processes", "pod", klog.KObj(pr.pod), "container", c.spec.Name)
	}
	_ = c.mountNS.Close()
	c.mountNS = nil
}

// gracePeriod is how long the containers have between SIGTERM and SIGKILL: the pod's
// deletion grace period when it has been deleted (a later delete may shorten it), else its
// terminationGracePeriodSeconds (default 30 s).
func (pr *podRun) gracePeriod() time.Duration {
	if g := pr.grace.Load(); g >= 0 {
		return time.Duration(g)
	}
	if g := pr.pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}

// deleted records the grace period of the pod's deletion, keeping the shortest seen.
func (pr *podRun) deleted(pod *v1.Pod) {
	if pod.DeletionGracePeriodSeconds == nil {
		return
	}
	g := int64(time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second)
	for {
		old := pr.grace.Load()
		if old >= 0 && old <= g || pr.grace.CompareAndSwap(old, g) {
			return
		}
	}
}

// report writes the pod's status when it changed since the last report.
func (pr *podRun) report(ctx context.Context) {
	st := pr.status()
	if pr.reported != nil && equality.Semantic.DeepEqual(pr.reported, st) {
		return
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pr.r.kube.CoreV1().Pods(pr.pod.Namespace).Get(ctx, pr.pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != pr.uid {
			return apierrors.NewNotFound(v1.Resource("pods"), pr.pod.Name)
		}
		st.QOSClass = pod.Status.QOSClass
		pod.Status = *st
		_, err = pr.r.kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			klog.ErrorS(err, "updating pod status", "pod", klog.KObj(pr.pod))
		}
		return
	}
	pr.reported = st
}

func (pr *podRun) status() *v1.PodStatus {
	st := &v1.PodStatus{
		HostIP: "127.0.0.1", HostIPs: []v1.HostIP{{IP: "127.0.0.1"}},
		PodIP: "127.0.0.1", PodIPs: []v1.PodIP{{IP: "127.0.0.1"}},
		StartTime: &pr.startedAt, QOSClass: pr.pod.Status.QOSClass,
	}
	allReady, running, ended, failed := true, 0, 0, 0
	for _, c := range pr.containers {
		cs := v1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, ImageID: c.spec.Image,
			RestartCount: c.restarts, Ready: c.proc != nil && c.ready, Started: ptr(c.proc != nil)}
		switch {
		case c.proc != nil:
			running++
			cs.ContainerID = containerID(c.proc)
			cs.State.Running = &v1.ContainerStateRunning{StartedAt: c.startedAt}
			cs.LastTerminationState.Terminated = c.lastTerm
		case c.waiting != nil:
			cs.State.Waiting = c.waiting
			cs.LastTerminationState.Terminated = c.lastTerm
		case c.lastTerm != nil:
			ended++
			if c.lastTerm.ExitCode != 0 {
				failed++
			}
			cs.State.Terminated = c.lastTerm
		}
		allReady = allReady && cs.Ready
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	switch {
	case ended == len(pr.containers) && failed > 0:
		st.Phase = v1.PodFailed
	case ended == len(pr.containers):
		st.Phase = v1.PodSucceeded
	case pr.prepared:
		st.Phase = v1.PodRunning
	default:
		st.Phase = v1.PodPending
	}
	cond := func(t v1.PodConditionType, ok bool) v1.PodCondition {
		s := v1.ConditionFalse
		if ok {
			s = v1.ConditionTrue
		}
		return v1.PodCondition{Type: t, Status: s, LastTransitionTime: pr.startedAt}
	}
	st.Conditions = []v1.PodCondition{
		cond(v1.PodScheduled, true), cond(v1.PodInitialized, true),
		cond(v1.PodReadyToStartContainers, pr.prepared),
		cond(v1.ContainersReady, allReady), cond(v1.PodReady, allReady),
	}
	return st
}

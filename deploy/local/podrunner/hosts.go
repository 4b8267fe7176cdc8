package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The runner's pods share the host's network, so every Service and every pod is reached at
// 127.0.0.1. With no cluster DNS on the local cluster, a Slurm image's /etc/hosts stands in
// for it: the names a pod would resolve through kube-dns (Services, and the pods of
// headless Services by hostname.subdomain) all map to the loopback address.

// podHostname is the pod's hostname as a kubelet sets it.
func podHostname(p *v1.Pod) string {
	if p.Spec.Hostname != "" {
		return p.Spec.Hostname
	}
	return p.Name
}

// hostsFile renders /etc/hosts for pod: localhost, the pod's own names, the Services' DNS
// names (short names only in the pod's namespace) and the names of the other pods of
// headless Services.
func hostsFile(pod *v1.Pod, services []v1.Service, pods []*v1.Pod) string {
	names := map[string]bool{}
	add := func(ns string, parts ...string) {
		n := strings.Join(parts, ".")
		names[n+"."+ns+".svc"], names[n+"."+ns+".svc.cluster.local"] = true, true
		if ns == pod.Namespace {
			names[n] = true
		}
	}
	names[podHostname(pod)] = true
	for _, s := range services {
		add(s.Namespace, s.Name)
		names[s.Name+"."+s.Namespace] = true
	}
	for _, p := range append(pods, pod) {
		if p.Spec.Subdomain != "" {
			add(p.Namespace, podHostname(p), p.Spec.Subdomain)
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	var b strings.Builder
	b.WriteString("# Written by kubeslurm-podrunner: every pod and Service of the local cluster is on this host.\n")
	b.WriteString("127.0.0.1\tlocalhost\n")
	for _, n := range sorted {
		fmt.Fprintf(&b, "127.0.0.1\t%s\n", n)
	}
	return b.String()
}

// writeHosts writes the pod's hosts file as the cluster is now, and returns its path.
func (pr *podRun) writeHosts() (string, error) {
	svcs, err := pr.r.kube.CoreV1().Services(metav1.NamespaceAll).List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing services for /etc/hosts: %w", err)
	}
	var pods []*v1.Pod
	for _, o := range pr.r.lister.List() {
		if p, ok := o.(*v1.Pod); ok && p.UID != pr.pod.UID {
			pods = append(pods, p)
		}
	}
	path := filepath.Join(pr.dir, "hosts")
	return path, os.WriteFile(path, []byte(hostsFile(pr.pod, svcs.Items, pods)), 0o644)
}

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestHostsFile(t *testing.T) {
	ctld := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "slurm-controller-0"},
		Spec: v1.PodSpec{Hostname: "slurm-controller-0", Subdomain: "slurm-controller"}}
	client := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "client"}}
	svcs := []v1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "slurm-controller"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "db"}},
	}
	want := "# Written by kubeslurm-podrunner: every pod and Service of the local cluster is on this host.\n" +
		"127.0.0.1\tlocalhost\n" +
		"127.0.0.1\tclient\n" +
		"127.0.0.1\tdb.other\n" +
		"127.0.0.1\tdb.other.svc\n" +
		"127.0.0.1\tdb.other.svc.cluster.local\n" +
		"127.0.0.1\tslurm-controller\n" +
		"127.0.0.1\tslurm-controller-0.slurm-controller\n" +
		"127.0.0.1\tslurm-controller-0.slurm-controller.hpc.svc\n" +
		"127.0.0.1\tslurm-controller-0.slurm-controller.hpc.svc.cluster.local\n" +
		"127.0.0.1\tslurm-controller.hpc\n" +
		"127.0.0.1\tslurm-controller.hpc.svc\n" +
		"127.0.0.1\tslurm-controller.hpc.svc.cluster.local\n"
	// The client resolves the Services and the controller pod by its headless name; the
	// other namespace's Service only by its qualified names.
	assert.Equal(t, want, hostsFile(client, svcs, []*v1.Pod{ctld}))
	assert.Contains(t, hostsFile(ctld, svcs, nil), "127.0.0.1\tslurm-controller-0\n")
}

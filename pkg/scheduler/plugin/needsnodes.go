package plugin

import (
	"sync"

	v1 "k8s.io/api/core/v1"
)

// needsNodes remembers the jobs Slurm refused because none of its current nodes could run
// them (a 5-node group on 4 nodes): their pods wait, without resubmitting, until Slurm's
// nodes change, and are re-activated then. Keyed by group key, or pod UID for one pod.
type needsNodes struct {
	mu sync.Mutex
	// why holds Slurm's refusal per job key.
	why map[string]string
	// pods are the pods waiting on those keys, by namespace/name.
	pods map[string]*v1.Pod
}

func newNeedsNodes() *needsNodes {
	return &needsNodes{why: map[string]string{}, pods: map[string]*v1.Pod{}}
}

// refused records Slurm's refusal of the job with this key, and the pod that asked.
func (n *needsNodes) refused(key, why string, pod *v1.Pod) {
	n.mu.Lock()
	n.why[key] = why
	n.mu.Unlock()
	n.waiting(key, pod)
}

// waiting returns Slurm's refusal of the key's job, if any, and then counts the pod among
// those to re-activate when nodes change.
func (n *needsNodes) waiting(key string, pod *v1.Pod) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	why, ok := n.why[key]
	if ok {
		n.pods[pod.Namespace+"/"+pod.Name] = pod
	}
	return why, ok
}

// nodesChanged forgets every refusal and returns the pods to re-activate.
func (n *needsNodes) nodesChanged() map[string]*v1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	pods := n.pods
	n.why, n.pods = map[string]string{}, map[string]*v1.Pod{}
	return pods
}

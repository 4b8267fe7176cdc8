package node

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// drainAction is what a node's Slurm drain needs, given the reason we want (empty: no
// drain wanted) and the node as Slurm reports it.
type drainAction int

const (
	keepDrain drainAction = iota
	setDrain
	clearDrain
)

// decideDrain compares the drain we want with the one Slurm has. Only a drain whose
// reason is of the form we write ("kubeslurm: node <name> ...", ourReason) is ours: any
// other (an admin's `scontrol update state=drain reason=hw`, or a SlurmCluster worker's
// "kubeslurm: worker pod <pod> deleted" while it scales in) is never overwritten and never
// undone.
func decideDrain(want string, n *slurm.Node) drainAction {
	ours := strings.HasPrefix(n.Reason, ourReasonPrefix(n.Name))
	drained := n.Has(slurm.NodeDrain)
	switch {
	case want != "" && !drained:
		return setDrain
	case want != "" && ours && !sameReason(n.Reason, want):
		return setDrain // ours, for another cause: bring the reason up to date
	case want == "" && drained && ours:
		return clearDrain
	}
	return keepDrain
}

// sameReason: slurmctld appends to a reason when the node goes down
// ("kubeslurm: ... : Not responding"); that is still the reason we wrote.
func sameReason(have, want string) bool {
	return have == want || strings.HasPrefix(have, want+" : ")
}

// drainReason is the reason we want Slurm to drain the node for, or "" when nothing on
// the Kubernetes side asks for a drain: the node is cordoned, or one of the conditions
// listed (type True means unhealthy) holds.
func drainReason(node *v1.Node, conditions []string) string {
	var causes []string
	if node.Spec.Unschedulable {
		c := "cordoned in Kubernetes"
		if custom := strings.TrimSpace(node.Annotations[wellknown.DrainReasonAnnotation]); custom != "" {
			c += ": " + custom
		}
		causes = append(causes, c)
	}
	for _, t := range conditions {
		c := nodeCondition(node, v1.NodeConditionType(t))
		if c == nil || c.Status != v1.ConditionTrue {
			continue
		}
		s := "condition " + t + " is True"
		switch {
		case c.Reason != "" && c.Message != "":
			s += " (" + c.Reason + ": " + c.Message + ")"
		case c.Reason != "" || c.Message != "":
			s += " (" + c.Reason + c.Message + ")"
		}
		causes = append(causes, s)
	}
	if len(causes) == 0 {
		return ""
	}
	return ourReason(node.Name, strings.Join(causes, "; "))
}

// deletedReason marks the drain of a busy Slurm node whose Kubernetes node was deleted:
// it lets the node empty, and tells a restarted controller to remove it once idle.
func deletedReason(name string) string { return ourReason(name, "deleted from Kubernetes") }

func ourReason(name, why string) string {
	return slurm.SanitizeReason(ourReasonPrefix(name) + why)
}

// ourReasonPrefix starts every reason ourReason writes for node name.
func ourReasonPrefix(name string) string { return wellknown.ReasonPrefix + "node " + name + " " }

// slurmConditions are the node conditions mirroring the Slurm node's state flags, by
// type: one per flag, DRAIN shown as Draining while jobs hold the node and Drained once
// none does, as sinfo shows it.
func slurmConditions(n *slurm.Node) map[v1.NodeConditionType]v1.NodeCondition {
	out := map[v1.NodeConditionType]v1.NodeCondition{}
	for _, flag := range n.StateFlags() {
		t := v1.NodeConditionType(wellknown.SlurmNodeConditionPrefix + slurm.CamelCase(flag))
		if flag == slurm.NodeDrain {
			t = wellknown.SlurmNodeDrainedCondition
			if n.Busy() {
				t = wellknown.SlurmNodeDrainingCondition
			}
		}
		out[t] = v1.NodeCondition{Type: t, Status: v1.ConditionTrue, Reason: slurm.CamelCase(flag), Message: n.Reason}
	}
	return out
}

// mergeConditions returns the node's conditions with ours set to want: others' untouched
// and in place, ours updated in place (the transition time kept while the status holds),
// ours no longer wanted (or duplicated) dropped, new ones appended in type order.
func mergeConditions(have []v1.NodeCondition, want map[v1.NodeConditionType]v1.NodeCondition, now metav1.Time) ([]v1.NodeCondition, bool) {
	out := make([]v1.NodeCondition, 0, len(have)+len(want))
	seen := map[v1.NodeConditionType]bool{}
	changed := false
	for _, c := range have {
		if !isOurs(c.Type) {
			out = append(out, c)
			continue
		}
		w, ok := want[c.Type]
		if !ok || seen[c.Type] {
			changed = true
			continue
		}
		seen[c.Type] = true
		if c.Status != w.Status || c.Reason != w.Reason || c.Message != w.Message {
			if c.Status != w.Status {
				c.LastTransitionTime = now
			}
			c.Status, c.Reason, c.Message, c.LastHeartbeatTime = w.Status, w.Reason, w.Message, now
			changed = true
		}
		out = append(out, c)
	}
	types := make([]v1.NodeConditionType, 0, len(want))
	for t := range want {
		if !seen[t] {
			types = append(types, t)
		}
	}
	slices.Sort(types)
	for _, t := range types {
		c := want[t]
		c.LastTransitionTime, c.LastHeartbeatTime = now, now
		out = append(out, c)
		changed = true
	}
	return out, changed
}

func isOurs(t v1.NodeConditionType) bool {
	return strings.HasPrefix(string(t), wellknown.SlurmNodeConditionPrefix)
}

func nodeCondition(node *v1.Node, t v1.NodeConditionType) *v1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// wantTaint reports whether the node should carry our taint: Slurm drained it or marked
// it down. On a state Slurm itself does not know (UNKNOWN, or no flags) the answer is
// "keep what is there", so a taint is never lifted on a guess.
func wantTaint(n *slurm.Node, present bool) bool {
	if n.Has(slurm.NodeDrain) || n.Has(slurm.NodeDown) {
		return true
	}
	if n.Has(slurm.NodeUnknown) || len(n.StateFlags()) == 0 {
		return present
	}
	return false
}

// ParseTaintEffect reads the --slurm-drain-taint-effect flag; "none" gives "" (no taint).
func ParseTaintEffect(s string) (v1.TaintEffect, error) {
	switch e := v1.TaintEffect(s); e {
	case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		return e, nil
	case "none":
		return "", nil
	}
	return "", fmt.Errorf("taint effect %q: want NoSchedule, PreferNoSchedule, NoExecute or none", s)
}

// ValidateDrainConditions checks the --drain-on-node-conditions list. Our own SlurmNode*
// conditions would feed back into the drain they report; Ready is True when healthy, the
// opposite of what the list means.
func ValidateDrainConditions(types []string) error {
	for _, t := range types {
		switch {
		case t == "":
			return fmt.Errorf("empty node condition type")
		case isOurs(v1.NodeConditionType(t)):
			return fmt.Errorf("node condition %s is kubeslurm's own (it mirrors Slurm's state)", t)
		case t == string(v1.NodeReady):
			return fmt.Errorf("node condition Ready is True when the node is healthy; list conditions that are True when it is not")
		}
	}
	return nil
}

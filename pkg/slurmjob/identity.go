package slurmjob

import (
	"encoding/json"
	"fmt"

	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// Identity is what a placeholder job's admin_comment holds: the pods it stands for, in
// rank order, and for a pod group the group's key. admin_comment, unlike the name or
// comment, can only be set by Slurm operators, so a user's sbatch job cannot pass itself
// off as one of ours.
type Identity struct {
	// Group is the key of the pod group the job was submitted for; empty for one pod.
	Group string   `json:"group,omitempty"`
	Pods  []PodRef `json:"pods"`
}

// EncodeIdentity returns the admin_comment recording which pods a job stands for.
func EncodeIdentity(id Identity) string {
	b, err := json.Marshal(map[string]Identity{wellknown.AdminCommentKey: id})
	if err != nil {
		panic(fmt.Sprintf("encoding pod identity: %v", err)) // Identity always marshals
	}
	return string(b)
}

// DecodeIdentity returns the identity recorded in a job's admin_comment, and false when
// the comment is not ours (any other job in the cluster).
func DecodeIdentity(adminComment string) (Identity, bool) {
	if adminComment == "" || adminComment[0] != '{' {
		return Identity{}, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(adminComment), &m); err != nil {
		return Identity{}, false
	}
	raw, ok := m[wellknown.AdminCommentKey]
	if !ok {
		return Identity{}, false
	}
	var id Identity
	if err := json.Unmarshal(raw, &id); err != nil || len(id.Pods) == 0 {
		return Identity{}, false
	}
	return id, true
}

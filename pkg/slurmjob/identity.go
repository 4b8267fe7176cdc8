package slurmjob

import (
	"encoding/json"
	"fmt"

	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// identity is what a placeholder job's admin_comment holds. admin_comment, unlike the
// name or comment, can only be set by Slurm operators, so a user's sbatch job cannot
// pass itself off as one of ours.
type identity struct {
	Pods []PodRef `json:"pods"`
}

// EncodeIdentity returns the admin_comment recording which pods a job stands for.
func EncodeIdentity(pods []PodRef) string {
	b, err := json.Marshal(map[string]identity{wellknown.AdminCommentKey: {Pods: pods}})
	if err != nil {
		panic(fmt.Sprintf("encoding pod identity: %v", err)) // PodRef always marshals
	}
	return string(b)
}

// DecodeIdentity returns the pods recorded in a job's admin_comment, and false when the
// comment is not ours (any other job in the cluster).
func DecodeIdentity(adminComment string) ([]PodRef, bool) {
	if adminComment == "" || adminComment[0] != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(adminComment), &m); err != nil {
		return nil, false
	}
	raw, ok := m[wellknown.AdminCommentKey]
	if !ok {
		return nil, false
	}
	var id identity
	if err := json.Unmarshal(raw, &id); err != nil || len(id.Pods) == 0 {
		return nil, false
	}
	return id.Pods, true
}

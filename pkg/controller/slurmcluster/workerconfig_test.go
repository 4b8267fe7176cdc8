package slurmcluster

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurm/slurmtest"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// The workers are told of each newly applied configuration once, not of the first one
// (which they fetched as they started), and again after a failed attempt.
func TestTellWorkers(t *testing.T) {
	for _, tc := range []struct {
		name             string
		applied, workers string
		fail             bool
		wantOps          []string
		wantWorkers      string
		wantErr          bool
	}{
		{name: "nothing applied yet", wantWorkers: ""},
		{name: "first configuration: fetched at start", applied: "a", wantWorkers: "a"},
		{name: "already told", applied: "a", workers: "a", wantWorkers: "a"},
		{name: "new configuration", applied: "b", workers: "a", wantOps: []string{"reconfigure"}, wantWorkers: "b"},
		{name: "slurmrestd fails: told later", applied: "b", workers: "a", fail: true, wantWorkers: "a", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, newCluster())
			sl := slurmtest.New()
			if tc.fail {
				sl.FailWith = errors.New("connection refused")
			}
			status := &slurmv1.SlurmClusterStatus{AppliedConfigHash: tc.applied, WorkersConfigHash: tc.workers}
			err := f.r.tellWorkers(context.Background(), newCluster(), sl, status)
			if tc.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.wantOps, sl.NodeOps())
			assert.Equal(t, tc.wantWorkers, status.WorkersConfigHash)
			ev := f.events()
			if tc.wantOps != nil {
				require.Len(t, ev, 1)
				assert.Equal(t, "Normal "+wellknown.EventSlurmWorkersReconfigured+" slurmctld sent configuration b to every slurmd (was a)", ev[0])
			} else {
				assert.Empty(t, ev)
			}
		})
	}
}

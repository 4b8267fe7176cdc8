package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	api "github.com/SlinkyProject/slurm-client/api/v0044"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
)

// queueUser submits the queued sbatch jobs: a user of the Slurm root other than ours
// (Debian's daemon account; slurmctld refuses jobs of nobody).
const queueUser = "daemon"

// queuedJobs is the depth of the sbatch queue TestQueuedSbatchJobsCostNoListing builds.
const queuedJobs = 2000

// TestQueuedSbatchJobsCostNoListing: with 2,000 held sbatch jobs of another user queued,
// a pod is still bound within 10 s, and neither the scheduler nor the controller lists
// Slurm's jobs meanwhile: their Slurm request metrics show state reads of our own jobs,
// at most one full listing each (their periodic one, every 5 min, may fall in the
// window), and, when none did, a few KB of answers where one listing would be ~17 MB.
func TestQueuedSbatchJobsCostNoListing(t *testing.T) {
	ns := namespace(t)
	token := metricsReaderToken(t, ns)
	submitQueuedJobs(t, queueUser, ns+"/queued", queuedJobs)
	eventually(t, 30*time.Second, "the metrics reader's RBAC in effect", func() bool {
		code, _ := scrape(t, schedulerMetricsURL, token)
		return code == http.StatusOK
	})

	schedBefore, ctrlBefore := mustScrape(t, schedulerMetricsURL, token), mustScrape(t, controllerMetricsURL, "")
	start := time.Now()
	createPod(t, ns, "beside-the-queue")
	p := waitBound(t, ns, "beside-the-queue", 10*time.Second)
	bound := time.Since(start)
	// An idle stretch after the placement, so the window holds at least ten polls.
	time.Sleep(time.Until(start.Add(10 * time.Second)))
	window := time.Since(start)
	sched, ctrl := mustScrape(t, schedulerMetricsURL, token), mustScrape(t, controllerMetricsURL, "")

	for _, c := range []struct {
		name          string
		before, after series
	}{{"scheduler", schedBefore, sched}, {"controller", ctrlBefore, ctrl}} {
		delta := func(name string) float64 { return c.after[name] - c.before[name] }
		listings := delta(`kubeslurm_slurmrestd_requests_total{code="ok",operation="list_jobs"}`)
		states := delta(`kubeslurm_slurmrestd_requests_total{code="ok",operation="job_states"}`)
		read := delta("kubeslurm_slurmrestd_response_bytes_total")
		t.Logf("%s over %v: %v full job listings, %v state reads, %.0f bytes read from slurmrestd (%.0f B/s)",
			c.name, window.Round(time.Millisecond), listings, states, read, read/window.Seconds())
		assert.LessOrEqual(t, listings, 1.0, "%s: no full listing of the %d queued jobs but its periodic one", c.name, queuedJobs)
		assert.GreaterOrEqual(t, states, 5.0, "%s: reads the state of our jobs instead", c.name)
		if listings == 0 {
			assert.Less(t, read, 1e6, "%s: a few KB a poll whatever the queue", c.name)
		}
	}
	t.Logf("%s bound to %s %v after its creation, beside %d queued sbatch jobs", p.Name, p.Spec.NodeName, bound.Round(time.Millisecond), queuedJobs)
}

// submitQueuedJobs submits n held batch jobs named name as user (a user of the Slurm
// root other than ours), through slurmrestd with a token of that user, and cancels them
// at the test's end.
func submitQueuedJobs(t *testing.T, user, name string, n int) {
	t.Helper()
	env, err := localEnv()
	require.NoError(t, err)
	tokens := slurm.NewTokenSource(env["SLURM_JWT_KEY_FILE"], user, time.Hour)
	t.Cleanup(func() { slurmCmd(t, "scancel", "--name", name) })
	body, err := json.Marshal(api.V0044JobSubmitReq{Job: &api.V0044JobDescMsg{
		Name: ptr.To(name), Hold: ptr.To(true), Script: ptr.To("#!/bin/sh\nsleep 60\n"),
		CurrentWorkingDirectory: ptr.To("/tmp"), Environment: &[]string{"PATH=/bin:/usr/bin"},
	}})
	require.NoError(t, err)
	url := env["SLURMRESTD_URL"] + "/slurm/" + slurm.APIVersion + "/job/submit"
	submit := func() error {
		tok, err := tokens.Token()
		if err != nil {
			return err
		}
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-SLURM-USER-NAME", user)
		req.Header.Set("X-SLURM-USER-TOKEN", tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("submit as %s: %s: %s", user, resp.Status, out)
		}
		return nil
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan struct{}, n)
	for range n {
		work <- struct{}{}
	}
	close(work)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				if err := submit(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("%d held jobs of %s queued in %v", n, user, time.Since(start).Round(time.Millisecond))
}

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// The local cluster's metrics endpoints (deploy/local/lib.sh): kube-scheduler's secure port
// (delegated authn/authz, as in a cluster) and the controller's metrics server.
const (
	schedulerMetricsURL  = "https://127.0.0.1:10259/metrics"
	controllerMetricsURL = "http://127.0.0.1:8081/metrics"
)

// series reads one scrape: every sample's value by "name{label="value",...}" (labels
// sorted, as the exposition writes them), histograms by name_count and name_sum.
type series map[string]float64

// TestMetricsEndpoints: after a pod is placed, a Slurm submit is refused, and a node is
// cordoned and uncordoned, both binaries' /metrics show kubeslurm's series with the
// counts that work produced, read as Prometheus would (the scheduler's with a service
// account token allowed `get` on /metrics).
func TestMetricsEndpoints(t *testing.T) {
	ns := namespace(t)
	token := metricsReaderToken(t, ns)

	// The scheduler's /metrics needs authorization: no token, no metrics.
	code, _ := scrape(t, schedulerMetricsURL, "")
	assert.Contains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, code, "anonymous scrape of the scheduler")

	var schedBefore series
	eventually(t, 30*time.Second, "the metrics reader's RBAC in effect", func() bool {
		code, s := scrape(t, schedulerMetricsURL, token)
		schedBefore = s
		return code == http.StatusOK
	})
	ctrlBefore := mustScrape(t, controllerMetricsURL, "")

	// Work for every series: a placement, a submit Slurm refuses, a drain each way.
	labelNamespace(t, ns, wellknown.AdmissionIgnoreLabel, wellknown.AdmissionIgnoreValue)
	createPod(t, ns, "measured")
	createPod(t, ns, "refused", withAnnotation("partition", "nosuchpartition"))
	p := waitBound(t, ns, "measured", 60*time.Second)
	eventually(t, 30*time.Second, "Slurm's refusal shown on the pod", func() bool {
		return strings.Contains(podEvents(t, getPod(t, ns, "refused")), wellknown.EventSlurmJobSubmitFailed)
	})

	node := nodes[0]
	if node == p.Spec.NodeName {
		node = nodes[1]
	}
	restoreNodeAtEnd(t, node)
	nodeKubectl(t, "cordon", node)
	eventually(t, 10*time.Second, "taint on cordoned "+node, func() bool { return hasSlurmTaint(getNode(t, node)) })
	nodeKubectl(t, "uncordon", node)
	eventually(t, 10*time.Second, "taint lifted from "+node, func() bool { return !hasSlurmTaint(getNode(t, node)) })

	sched := mustScrape(t, schedulerMetricsURL, token)
	// The controller observes a drain's lag just after its write lands, so the taint can be
	// seen gone a moment before the second observation: scrape until both directions show
	// the drain and the undrain, for up to 10 s (the assertions below then say what is missing).
	toSlurm := `kubeslurm_drain_sync_lag_seconds_count{direction="to_slurm"}`
	toKube := `kubeslurm_drain_sync_lag_seconds_count{direction="to_kubernetes"}`
	ctrl := mustScrape(t, controllerMetricsURL, "")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); ctrl = mustScrape(t, controllerMetricsURL, "") {
		// The controller learns of the pod's job from its label and counts it at its next poll.
		if ctrl[toSlurm]-ctrlBefore[toSlurm] >= 2 && ctrl[toKube]-ctrlBefore[toKube] >= 2 && ctrl[`kubeslurm_placeholder_jobs{state="RUNNING"}`] >= 1 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The node's restore (a cleanup, run before the namespace's) waits for idle nodes.
	require.NoError(t, kube.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}))
	waitGone(t, ns, p.Name, 60*time.Second)

	grew := func(name string, before, after series, atLeast float64) {
		t.Helper()
		v, ok := after[name]
		if assert.True(t, ok, "series %s present", name) {
			assert.GreaterOrEqual(t, v-before[name], atLeast, "%s grew (was %v, now %v)", name, before[name], v)
		}
	}
	present := func(name string, s series) {
		t.Helper()
		_, ok := s[name]
		assert.True(t, ok, "series %s present", name)
	}

	// Scheduler: placement latencies, its slurmrestd calls, its watcher's view.
	grew("kubeslurm_job_submit_duration_seconds_count", schedBefore, sched, 2)
	grew("kubeslurm_allocation_wait_seconds_count", schedBefore, sched, 1)
	grew("kubeslurm_bind_latency_seconds_count", schedBefore, sched, 1)
	grew(`kubeslurm_slurmrestd_requests_total{code="ok",operation="submit"}`, schedBefore, sched, 1)
	grew(`kubeslurm_slurmrestd_request_errors_total{operation="submit",reason="rejected"}`, schedBefore, sched, 1)
	// Its watcher reads our jobs' states, not every job (a full listing only every 5 min).
	grew(`kubeslurm_slurmrestd_requests_total{code="ok",operation="job_states"}`, schedBefore, sched, 1)
	assert.GreaterOrEqual(t, sched[`kubeslurm_placeholder_jobs{state="RUNNING"}`], 1.0, "the bound pod's job is running")
	present(`kubeslurm_slurmrestd_request_errors_total{operation="list_jobs",reason="unavailable"}`, sched)

	// Controller: drain sync both ways (drain and undrain, taint and its removal), its calls.
	grew(toSlurm, ctrlBefore, ctrl, 2)
	grew(toKube, ctrlBefore, ctrl, 2)
	grew(`kubeslurm_slurmrestd_requests_total{code="ok",operation="drain_node"}`, ctrlBefore, ctrl, 1)
	grew(`kubeslurm_slurmrestd_requests_total{code="ok",operation="undrain_node"}`, ctrlBefore, ctrl, 1)
	grew(`kubeslurm_slurmrestd_requests_total{code="ok",operation="list_nodes_since"}`, ctrlBefore, ctrl, 1)
	assert.GreaterOrEqual(t, ctrl[`kubeslurm_placeholder_jobs{state="RUNNING"}`], 1.0)
	present(`kubeslurm_slurmrestd_request_errors_total{operation="drain_node",reason="unavailable"}`, ctrl)
	t.Logf("scheduler: allocation wait %.3fs over %v jobs, bind latency %.3fs over %v pods; controller: drain lag to Slurm %.3fs over %v, to Kubernetes %.3fs over %v",
		sched["kubeslurm_allocation_wait_seconds_sum"], sched["kubeslurm_allocation_wait_seconds_count"],
		sched["kubeslurm_bind_latency_seconds_sum"], sched["kubeslurm_bind_latency_seconds_count"],
		ctrl[`kubeslurm_drain_sync_lag_seconds_sum{direction="to_slurm"}`], ctrl[`kubeslurm_drain_sync_lag_seconds_count{direction="to_slurm"}`],
		ctrl[`kubeslurm_drain_sync_lag_seconds_sum{direction="to_kubernetes"}`], ctrl[`kubeslurm_drain_sync_lag_seconds_count{direction="to_kubernetes"}`])
}

// metricsReaderToken makes a service account allowed `get` on /metrics (as a Prometheus
// would have) and returns a token of it.
func metricsReaderToken(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	name := ns + "-metrics-reader"
	_, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "metrics-reader"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "metrics-reader",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo[int64](600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

func mustScrape(t *testing.T, url, token string) series {
	t.Helper()
	code, s := scrape(t, url, token)
	require.Equal(t, http.StatusOK, code, "GET %s", url)
	return s
}

// scrape GETs a metrics endpoint and parses it when it answered 200. The scheduler's
// serving certificate is self-signed (kube-scheduler makes one when given none).
func scrape(t *testing.T, url, token string) (int, series) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Do(req)
	require.NoError(t, err, "GET %s", url)
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, "parsing %s", url)
	out := series{}
	for name, f := range families {
		if !strings.HasPrefix(name, "kubeslurm_") {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := labelString(m)
			switch {
			case m.Histogram != nil:
				out[name+"_count"+labels] = float64(m.Histogram.GetSampleCount())
				out[name+"_sum"+labels] = m.Histogram.GetSampleSum()
			case m.Counter != nil:
				out[name+labels] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[name+labels] = m.Gauge.GetValue()
			}
		}
	}
	return resp.StatusCode, out
}

func labelString(m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return ""
	}
	parts := make([]string, 0, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

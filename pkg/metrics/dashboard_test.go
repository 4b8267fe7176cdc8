package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const dashboardFile = "../../charts/kubeslurm/dashboards/kubeslurm.json"

var (
	fqName    = regexp.MustCompile(`fqName: "([^"]+)"`)
	seriesRef = regexp.MustCompile(`\bkubeslurm_[a-z0-9_]+`)
)

// defined maps every series name the package defines to whether it is a histogram.
func defined() map[string]bool {
	out := map[string]bool{}
	for _, c := range All() {
		_, hist := c.(prometheus.Histogram)
		if _, vec := c.(*prometheus.HistogramVec); vec {
			hist = true
		}
		ch := make(chan *prometheus.Desc, 8)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			// Desc has no name getter; its String() is the only public form.
			if m := fqName.FindStringSubmatch(d.String()); m != nil {
				out[m[1]] = hist
			}
		}
	}
	return out
}

// exprs collects every "expr" of the dashboard, wherever it is nested.
func exprs(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "expr" {
				*out = append(*out, s)
				continue
			}
			exprs(x, out)
		}
	case []any:
		for _, x := range v {
			exprs(x, out)
		}
	}
}

// seriesOf names the series an expression reads, and the references it cannot resolve.
func seriesOf(expr string, defs map[string]bool) (used []string, unknown []string) {
	for _, ref := range seriesRef.FindAllString(expr, -1) {
		name := ref
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(ref, suffix); ok && defs[base] {
				name = base
			}
		}
		if name == ref {
			hist, ok := defs[name]
			switch {
			case !ok:
				unknown = append(unknown, ref)
				continue
			case hist:
				unknown = append(unknown, ref+" (a histogram: read _bucket, _count or _sum)")
				continue
			}
		}
		used = append(used, name)
	}
	return used, unknown
}

func TestSeriesOf(t *testing.T) {
	defs := map[string]bool{"kubeslurm_h_seconds": true, "kubeslurm_total": false}
	tests := []struct {
		expr          string
		used, unknown []string
	}{
		{`rate(kubeslurm_h_seconds_bucket[5m])`, []string{"kubeslurm_h_seconds"}, nil},
		{`sum(kubeslurm_total) / sum(kubeslurm_h_seconds_count)`, []string{"kubeslurm_total", "kubeslurm_h_seconds"}, nil},
		{`kubeslurm_h_seconds`, nil, []string{"kubeslurm_h_seconds (a histogram: read _bucket, _count or _sum)"}},
		{`kubeslurm_total_bucket`, nil, []string{"kubeslurm_total_bucket"}},
		{`kubeslurm_typo_total`, nil, []string{"kubeslurm_typo_total"}},
	}
	for _, tt := range tests {
		used, unknown := seriesOf(tt.expr, defs)
		assert.Equal(t, tt.used, used, tt.expr)
		assert.Equal(t, tt.unknown, unknown, tt.expr)
	}
}

// TestDashboard: the chart's Grafana dashboard is valid JSON, every query reads only
// series this package defines, and every series is on it.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var dash map[string]any
	require.NoError(t, json.Unmarshal(raw, &dash))
	assert.NotEmpty(t, dash["title"])
	assert.NotEmpty(t, dash["uid"])

	defs := defined()
	require.Len(t, defs, len(All()))
	var all []string
	exprs(dash, &all)
	require.NotEmpty(t, all)
	onDashboard := map[string]bool{}
	for _, e := range all {
		used, unknown := seriesOf(e, defs)
		assert.Empty(t, unknown, "query %q", e)
		assert.NotEmpty(t, used, "query %q reads no kubeslurm series", e)
		for _, u := range used {
			onDashboard[u] = true
		}
	}
	for name := range defs {
		assert.True(t, onDashboard[name], "series %s has no panel", name)
	}
	assert.True(t, slices.ContainsFunc(all, func(e string) bool { return strings.Contains(e, "$job") }), "queries filter by the job variable")
}

package promcheck

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/labelkit/labels/metrics"
)

// exported is every series name a process of the service exports: the
// metrics package's, histograms as their _bucket, _sum and _count series.
func exported() map[string]bool {
	names := map[string]bool{}
	for _, n := range slices.Concat(metrics.Series(metrics.API), metrics.Series(metrics.Worker)) {
		names[n] = true
	}
	return names
}

// selected parses a PromQL expression and returns the metric name of each
// of its series selectors ("" for a selector without one).
func selected(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		names = append(names, name)
		return nil
	})
	return names, nil
}

// requireExported checks that expr parses, selects at least one series, and
// that every selector names a metric the service exports.
func requireExported(t *testing.T, known map[string]bool, where, expr string) {
	t.Helper()
	names, err := selected(expr)
	require.NoError(t, err, "%s: %q does not parse", where, expr)
	require.NotEmpty(t, names, "%s: %q selects no series", where, expr)
	for _, n := range names {
		require.NotEmpty(t, n, "%s: %q has a selector without a metric name", where, expr)
		require.True(t, known[n], "%s: %q selects %s, which no process exports", where, expr, n)
	}
}

// The checks find what they look for: a histogram's series, a name given
// as a matcher, and a metric that nothing exports.
func TestSelectedNames(t *testing.T) {
	t.Parallel()
	names, err := selected(`histogram_quantile(0.9, sum by (le) (rate(labels_http_request_duration_seconds_bucket[5m]))) / on() group_left {__name__="labels_store_up"}`)
	require.NoError(t, err)
	require.Equal(t, []string{"labels_http_request_duration_seconds_bucket", "labels_store_up"}, names)
	known := exported()
	require.True(t, known["labels_http_request_duration_seconds_bucket"])
	require.False(t, known["labels_http_request_duration_seconds"], "a histogram exports no series under its own name")
	require.True(t, known["labels_db_pool_connections"])
	require.False(t, known["labels_carrier_calls"])
	_, err = selected(`sum(rate(labels_store_up[5m])`)
	require.Error(t, err)
}

// Every alert rule's expression parses and names exported metrics.
func TestAlertRulesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../deploy/prometheus/alerts.yaml")
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f))
	known := exported()
	n := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			requireExported(t, known, "alerts.yaml "+r.Alert, r.Expr)
			n++
		}
	}
	require.Positive(t, n, "alerts.yaml: no rule read")
}

// grafanaVars are the dashboard's Grafana variables in PromQL, with a value
// of their kind for parsing.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// dashPanel is a panel of the dashboard's JSON model (a row holds its
// collapsed panels).
type dashPanel struct {
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// Every panel of the dashboard has a title, a description and at least one
// query, reads the dashboard's Prometheus data source, and every query parses
// and names exported metrics.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../deploy/grafana/labels.json")
	require.NoError(t, err)
	var d struct {
		Title  string      `json:"title"`
		UID    string      `json:"uid"`
		Panels []dashPanel `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	require.NotEmpty(t, d.Title)
	require.NotEmpty(t, d.UID)
	known := exported()
	var panels []dashPanel
	for _, p := range d.Panels {
		panels = append(panels, p)
		panels = append(panels, p.Panels...)
	}
	queried := 0
	for _, p := range panels {
		if p.Type == "row" {
			require.NotEmpty(t, p.Title, "a row without a title")
			continue
		}
		require.NotEmpty(t, p.Title, "a panel without a title")
		require.NotEmpty(t, p.Description, "panel %q has no description", p.Title)
		require.Equal(t, "prometheus", p.Datasource.Type, "panel %q", p.Title)
		require.Equal(t, "${datasource}", p.Datasource.UID, "panel %q: the dashboard's data source variable", p.Title)
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, q := range p.Targets {
			requireExported(t, known, "panel "+p.Title+" "+q.RefID, grafanaVars.Replace(q.Expr))
		}
		queried++
	}
	require.Positive(t, queried, "labels.json: no panel read")
}

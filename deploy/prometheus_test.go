package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// runbookURL is where every alert's runbook_url points: a section of
// docs/operations.md.
const runbookURL = "https://github.com/labelkit/labels/blob/main/docs/operations.md#"

// promtool returns the path of promtool, or skips the test when it is not
// installed (`go tool task promtool` installs it; `go tool task test` does
// first).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed: `go tool task promtool` installs Debian's prometheus package (as root)")
	}
	return p
}

// promtool accepts the rules, and its unit tests (alerts_test.yaml) pass.
func TestAlertRulesPassPromtool(t *testing.T) {
	t.Parallel()
	p := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "prometheus/alerts.yaml"},
		{"test", "rules", "prometheus/alerts_test.yaml"},
	} {
		out, err := exec.Command(p, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
		require.Contains(t, string(out), "SUCCESS", "promtool %s", strings.Join(args, " "))
	}
}

// alertRule is one rule of alerts.yaml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// readFile returns the content of path, failing the test if it cannot be read.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func readAlertRules(t *testing.T) []alertRule {
	t.Helper()
	b := readFile(t, "prometheus/alerts.yaml")
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f))
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	require.NotEmpty(t, rules)
	return rules
}

// headingAnchor is the anchor GitHub gives a Markdown heading: lower case,
// punctuation other than - and _ dropped, spaces made hyphens.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// runbookSections returns the anchors of every heading of docs/operations.md,
// and those of the sections under "## Alerts and what to do".
func runbookSections(t *testing.T) (all, alerts []string) {
	t.Helper()
	b := readFile(t, "../docs/operations.md")
	heading := regexp.MustCompile(`^(#{2,4}) (.+)$`)
	inAlerts := false
	for line := range strings.SplitSeq(string(b), "\n") {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := headingAnchor(m[2])
		all = append(all, a)
		if m[1] == "##" {
			inAlerts = a == "alerts-and-what-to-do"
		} else if inAlerts && m[1] == "###" {
			alerts = append(alerts, a)
		}
	}
	require.NotEmpty(t, alerts, "docs/operations.md: no section under ## Alerts and what to do")
	return all, alerts
}

// Every rule has a severity, a summary, a description and a runbook_url that
// names a section of docs/operations.md that exists; every section of the
// runbook's alerts has a rule that links it.
func TestAlertRulesLinkTheRunbook(t *testing.T) {
	t.Parallel()
	require.Equal(t, "oldest-intent-growing", headingAnchor("Oldest intent growing"))
	require.Equal(t, "prefer-wait-under-load", headingAnchor("Prefer: wait under load"))
	all, alertSections := runbookSections(t)
	linked := map[string]bool{}
	names := map[string]bool{}
	for _, r := range readAlertRules(t) {
		require.NotEmpty(t, r.Alert, "a rule without an alert name: %q (only alerting rules here)", r.Expr)
		require.False(t, names[r.Alert], "%s defined twice", r.Alert)
		names[r.Alert] = true
		require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], "%s: severity", r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], "%s: summary", r.Alert)
		require.NotEmpty(t, r.Annotations["description"], "%s: description", r.Alert)
		u := r.Annotations["runbook_url"]
		require.True(t, strings.HasPrefix(u, runbookURL), "%s: runbook_url %q is not a section of docs/operations.md", r.Alert, u)
		anchor := strings.TrimPrefix(u, runbookURL)
		require.Contains(t, all, anchor, "%s: runbook_url names #%s, which is no heading of docs/operations.md", r.Alert, anchor)
		linked[anchor] = true
	}
	for _, s := range alertSections {
		require.True(t, linked[s], "docs/operations.md#%s describes an alert that no rule of alerts.yaml links", s)
	}
}

// Every alert has a unit test in which it fires and one in which, at some
// evaluation, it does not.
func TestEveryAlertIsTestedBothWays(t *testing.T) {
	t.Parallel()
	b := readFile(t, "prometheus/alerts_test.yaml")
	var f struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f))
	require.Equal(t, []string{"alerts.yaml"}, f.RuleFiles)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	var rules []string
	for _, r := range readAlertRules(t) {
		rules = append(rules, r.Alert)
		require.True(t, fires[r.Alert], "alerts_test.yaml: no case fires %s", r.Alert)
		require.True(t, quiet[r.Alert], "alerts_test.yaml: no case where %s stays quiet", r.Alert)
	}
	for a := range fires {
		require.True(t, slices.Contains(rules, a), "alerts_test.yaml tests %s, which alerts.yaml does not define", a)
	}
}

// section returns the lines of docs/operations.md under the heading "## title",
// up to the next heading of that level.
func section(t *testing.T, title string) []string {
	t.Helper()
	b := readFile(t, "../docs/operations.md")
	var lines []string
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == "## "+title
			continue
		}
		if in {
			lines = append(lines, line)
		}
	}
	require.NotEmpty(t, lines, "docs/operations.md: no section ## %s", title)
	return lines
}

// tableAfter returns the cells of the rows of the Markdown table whose header
// row is header.
func tableAfter(t *testing.T, lines []string, header string) [][]string {
	t.Helper()
	i := slices.Index(lines, header)
	require.NotEqual(t, -1, i, "no table %q", header)
	var rows [][]string
	for _, l := range lines[i+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	return rows
}

// docs/operations.md lists every alert rule with its severity, its for and
// its runbook section, and every panel of the dashboard under its row, in
// the dashboard's order.
func TestRunbookListsEveryRuleAndPanel(t *testing.T) {
	t.Parallel()
	lines := section(t, "Alert rules and the dashboard")

	var want [][]string
	for _, r := range readAlertRules(t) {
		f := r.For
		if f == "" {
			f = "—"
		}
		anchor := strings.TrimPrefix(r.Annotations["runbook_url"], runbookURL)
		want = append(want, []string{"`" + r.Alert + "`", r.Labels["severity"], f, "[" + anchor + "](#" + anchor + ")"})
	}
	require.Equal(t, want, tableAfter(t, lines, "| alert | severity | for | runbook |"))

	b := readFile(t, "grafana/labels.json")
	var d struct {
		Panels []struct {
			Type  string `json:"type"`
			Title string `json:"title"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	var panels, documented [][]string
	row := ""
	for _, p := range d.Panels {
		if p.Type == "row" {
			row = p.Title
			continue
		}
		panels = append(panels, []string{row, p.Title})
	}
	require.NotEmpty(t, panels)
	for _, cells := range tableAfter(t, lines, "| row | panel | what it shows |") {
		require.Len(t, cells, 3)
		require.NotEmpty(t, cells[2], "panel %q: what it shows", cells[1])
		documented = append(documented, cells[:2])
	}
	require.Equal(t, panels, documented, "docs/operations.md's panel table against deploy/grafana/labels.json")
}

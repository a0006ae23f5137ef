package labels_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// docs/benchmarks.md's current figures are the latest run's: it links the
// latest bench/results/<date>.md, .json and .png, quotes the run's bar table
// row for row as the report wrote it, and the README's benchmark line names
// the same date. A new run committed without the documents fails here.
func TestBenchmarkFiguresAreTheLatestRun(t *testing.T) {
	t.Parallel()
	runs, err := filepath.Glob("bench/results/*.md")
	if err != nil {
		t.Fatal(err)
	}
	dated := regexp.MustCompile(`^\d{4}-\d{2}-\d{2}\.md$`)
	var dates []string
	for _, r := range runs {
		if dated.MatchString(filepath.Base(r)) {
			dates = append(dates, strings.TrimSuffix(filepath.Base(r), ".md"))
		}
	}
	if len(dates) == 0 {
		t.Fatal("bench/results holds no <date>.md of a run")
	}
	sort.Strings(dates)
	latest := dates[len(dates)-1]

	report, err := os.ReadFile(filepath.Join("bench", "results", latest+".md"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("docs", "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".md", ".json", ".png"} {
		if link := "../bench/results/" + latest + ext; !strings.Contains(string(doc), link) {
			t.Errorf("docs/benchmarks.md does not link %s, the latest run's", link)
		}
	}
	rows := barRows(string(report))
	if len(rows) == 0 {
		t.Fatalf("bench/results/%s.md: no rows under **The bar**", latest)
	}
	for _, r := range rows {
		if !strings.Contains(string(doc), r+"\n") {
			t.Errorf("docs/benchmarks.md does not quote the latest run's bar row %q", r)
		}
	}
	bench := string(readme)
	if i := strings.Index(bench, "## Benchmarks"); i >= 0 {
		bench = bench[i:]
	}
	if i := strings.Index(bench[1:], "\n## "); i >= 0 {
		bench = bench[:i+1]
	}
	if !strings.Contains(bench, latest) {
		t.Errorf("README.md's Benchmarks section does not name the latest run, %s", latest)
	}
}

// barRows returns the table rows (header and rule excluded) under a
// report's "**The bar**".
func barRows(report string) []string {
	i := strings.Index(report, "**The bar**")
	if i < 0 {
		return nil
	}
	var rows []string
	table := false
	for _, l := range strings.Split(report[i:], "\n")[1:] {
		l = strings.TrimRight(l, " ")
		if !strings.HasPrefix(l, "|") {
			if table {
				break
			}
			continue
		}
		table = true
		if strings.HasPrefix(l, "| check ") || strings.HasPrefix(l, "| ---") {
			continue
		}
		rows = append(rows, l)
	}
	return rows
}

package envdoc

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/worker"
)

// README's table names the variables of docs/operations.md's, and only
// those; a name ending in _* in README stands for every variable it prefixes.
func TestREADMENamesTheVariablesOfTheTable(t *testing.T) {
	t.Parallel()
	var table []string
	for _, r := range Table(t, "docs/operations.md") {
		table = append(table, r.Names...)
	}
	b, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	require.NoError(t, err)
	var names, prefixes []string
	in := false
	name := regexp.MustCompile("`([A-Z][A-Z0-9_]*?)(_\\*)?`")
	for line := range strings.SplitSeq(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = strings.TrimSpace(line) == "## Configuration"
		case in && strings.HasPrefix(line, "| `"):
			first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
			for _, m := range name.FindAllStringSubmatch(first, -1) {
				if m[2] != "" {
					prefixes = append(prefixes, m[1]+"_")
				} else {
					names = append(names, m[1])
				}
			}
		}
	}
	require.NotEmpty(t, names, "README.md has a configuration table")
	covered := func(n string) bool {
		return slices.Contains(names, n) || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(n, p) })
	}
	for _, n := range table {
		require.True(t, covered(n), "README.md's configuration table leaves out %s of docs/operations.md", n)
	}
	for _, n := range names {
		require.Contains(t, table, n, "README.md names %s, which docs/operations.md's table does not", n)
	}
	for _, p := range prefixes {
		require.True(t, slices.ContainsFunc(table, func(n string) bool { return strings.HasPrefix(n, p) }), "README.md's %s* stands for nothing", p)
	}
}

// The table's cells parse: every row names known binaries.
func TestTableParses(t *testing.T) {
	t.Parallel()
	rows := Table(t, "docs/operations.md")
	seen := map[string]bool{}
	for _, r := range rows {
		require.NotEmpty(t, r.UsedBy, r.Line)
		for _, n := range r.Names {
			require.False(t, seen[n], "%s has two rows", n)
			seen[n] = true
		}
	}
	require.Contains(t, Documented(t, "api"), "API_ADDR")
	require.NotContains(t, Documented(t, "api"), "GOGC", "read by the Go runtime, not compared")
	require.Contains(t, Documented(t, "carrier"), "SIM_FAIL_RATE")
	require.NotContains(t, Documented(t, "carrier"), "DATABASE_URL", "all but carrier")
}

// The default cells read as CheckDefaults says, and a documented default
// that differs from the code's fails.
func TestDefaultCells(t *testing.T) {
	t.Parallel()
	for cell, want := range map[string]struct {
		v    string
		kind cellKind
	}{
		"`30s`":                                {"30s", literal},
		"`0` (off)":                            {"0", literal},
		"`0`: 2 × `WORKER_CONCURRENCY`":        {"0", literal},
		"empty":                                {"", empty},
		"unset":                                {"", empty},
		"off":                                  {"", off},
		"`RATE_LIMIT`":                         {"", skip},
		"`0`: `RATE_LIMIT`":                    {"0", literal},
		"Go's `100`":                           {"", skip},
		"`true` when `X` is set, else `false`": {"", skip},
	} {
		v, kind := docDefault(cell)
		require.Equal(t, want.v, v, cell)
		require.Equal(t, want.kind, kind, cell)
	}
	require.NoError(t, matchDefault(30*time.Second, "30s", literal))
	require.NoError(t, matchDefault(24*time.Hour, "24h", literal))
	require.NoError(t, matchDefault(64, "64", literal))
	require.NoError(t, matchDefault(false, "false", literal))
	require.NoError(t, matchDefault(":8080", ":8080", literal))
	require.NoError(t, matchDefault("", "", empty))
	require.NoError(t, matchDefault(0, "", off))
	require.Error(t, matchDefault(31*time.Second, "30s", literal))
	require.Error(t, matchDefault(63, "64", literal))
	require.Error(t, matchDefault("x", "", empty))
	require.Error(t, matchDefault(1, "", off))
	require.Error(t, matchDefault(64, "sixty-four", literal))

	// A worker reading LEASE_DURATION with another default than the table's fails.
	ft := &failTB{TB: t}
	func() {
		defer func() { _ = recover() }()
		CheckDefaults(ft, "worker", []string{"LEASE_DURATION"}, map[string][]any{"LEASE_DURATION": {worker.DefaultLeaseDuration + time.Second}})
	}()
	require.True(t, ft.failed, "a default the table does not say fails")
	ft = &failTB{TB: t}
	func() {
		defer func() { _ = recover() }()
		CheckDefaults(ft, "worker", []string{"LEASE_DURATION"}, map[string][]any{"LEASE_DURATION": {worker.DefaultLeaseDuration, time.Minute}})
	}()
	require.True(t, ft.failed, "two defaults for one variable fail")
	CheckDefaults(t, "worker", []string{"LEASE_DURATION"}, map[string][]any{"LEASE_DURATION": {worker.DefaultLeaseDuration}})
}

// failTB records a failure instead of ending the test.
type failTB struct {
	testing.TB
	failed bool
}

func (f *failTB) Errorf(string, ...any) { f.failed = true }
func (f *failTB) FailNow()              { f.failed = true; panic(f) }

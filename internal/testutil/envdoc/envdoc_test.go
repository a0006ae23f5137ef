package envdoc

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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

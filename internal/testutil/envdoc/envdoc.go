// Package envdoc holds the configuration table of docs/operations.md to the
// code: each binary's test records every variable its configuration reads
// (Recorder) and Check compares that with the table's rows for the binary,
// both ways, so that neither the code nor the table can drift.
//
// A row of the table is one variable (or a few, comma-separated, in its
// first column) with the binaries that read it in its "used by" column:
// names of binaries, "all", or "all but NAME". A row whose "used by" says
// "Go runtime" is read by the runtime, not by the configuration, and is not
// compared.
package envdoc

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/cli"
)

// Binaries are the commands the table's "used by" column names.
var Binaries = []string{"api", "worker", "reconcile", "carrier"}

// Row is one row of the configuration table.
type Row struct {
	Names   []string
	UsedBy  []string
	Runtime bool // read by the Go runtime, not by a binary's configuration
	Line    string
}

// root is the module's root, found from this file.
func root(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

var nameRE = regexp.MustCompile("`([A-Z][A-Z0-9_]*)`")

// Table reads the table under "## Configuration" of the Markdown file at
// path (relative to the module root).
func Table(t testing.TB, path string) []Row {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), path))
	require.NoError(t, err)
	var rows []Row
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = strings.TrimSpace(line) == "## Configuration"
		case in && strings.HasPrefix(line, "| `"):
			cells := strings.Split(strings.Trim(line, "|"), " | ")
			require.GreaterOrEqual(t, len(cells), 4, "%s: a row of variable, default, used by, meaning: %s", path, line)
			r := Row{Line: line}
			for _, m := range nameRE.FindAllStringSubmatch(cells[0], -1) {
				r.Names = append(r.Names, m[1])
			}
			require.NotEmpty(t, r.Names, "%s: %s", path, line)
			r.UsedBy, r.Runtime = usedBy(t, strings.TrimSpace(cells[2]), line)
			rows = append(rows, r)
		}
	}
	require.NotEmpty(t, rows, "no configuration table in %s", path)
	return rows
}

func usedBy(t testing.TB, cell, line string) ([]string, bool) {
	t.Helper()
	rt := strings.Contains(cell, "Go runtime")
	cell, _, _ = strings.Cut(cell, "(")
	cell = strings.TrimSpace(cell)
	switch {
	case cell == "all":
		return Binaries, rt
	case strings.HasPrefix(cell, "all but "):
		but := strings.TrimPrefix(cell, "all but ")
		require.Contains(t, Binaries, but, "used by %q: %s", cell, line)
		return slices.DeleteFunc(slices.Clone(Binaries), func(b string) bool { return b == but }), rt
	}
	var out []string
	for b := range strings.SplitSeq(cell, ",") {
		b = strings.TrimSpace(b)
		require.Contains(t, Binaries, b, "used by names an unknown binary: %s", line)
		out = append(out, b)
	}
	return out, rt
}

// Documented returns the variables the table of docs/operations.md says
// binary reads through its configuration.
func Documented(t testing.TB, binary string) []string {
	t.Helper()
	var names []string
	for _, r := range Table(t, "docs/operations.md") {
		if !r.Runtime && slices.Contains(r.UsedBy, binary) {
			names = append(names, r.Names...)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Recorder is a getenv that answers from a map and remembers every name
// asked for.
type Recorder struct {
	mu   sync.Mutex
	env  map[string]string
	read map[string]bool
}

// NewRecorder returns a Recorder answering from env (nil: nothing is set).
func NewRecorder(env map[string]string) *Recorder {
	return &Recorder{env: env, read: map[string]bool{}}
}

// Getenv is the getenv function to hand to a binary's run.
func (r *Recorder) Getenv(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.read[name] = true
	return r.env[name]
}

// Read returns the names asked for so far, sorted.
func (r *Recorder) Read() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for n := range r.read {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Check compares what binary's configuration read with the table: every
// variable read is documented for it, and every variable documented for it
// is read.
func Check(t testing.TB, binary string, read []string) {
	t.Helper()
	documented := Documented(t, binary)
	for _, n := range read {
		require.Contains(t, documented, n, "%s reads %s, which docs/operations.md's configuration table does not list for %s", binary, n, binary)
	}
	for _, n := range documented {
		require.Contains(t, read, n, "docs/operations.md lists %s for %s, which its configuration does not read", n, binary)
	}
}

// CheckHelp runs binary --help (and each extra command's --help, such as
// "void") through run, which must exit 0 after reading its configuration,
// and then [Check]s what it read.
func CheckHelp(t testing.TB, binary string, run cli.Run, extra ...string) {
	t.Helper()
	rec := NewRecorder(nil)
	runs := [][]string{{binary, "--help"}}
	for _, c := range extra {
		runs = append(runs, []string{binary, c, "--help"})
	}
	for _, args := range runs {
		require.Equal(t, 0, run(context.Background(), args, rec.Getenv, io.Discard, io.Discard), "%v", args)
	}
	Check(t, binary, rec.Read())
}

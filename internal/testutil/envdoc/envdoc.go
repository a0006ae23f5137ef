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
//
// The table's default column, and README's, is held to the code the same
// way: each binary's configuration is read through cli.NewEnv, which tells
// the Recorder (cli.RecordDefaults) the default each variable is read with,
// and CheckDefaults compares the documented defaults with those (see
// [CheckDefaults] for the cells it reads).
package envdoc

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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
	var rows []Row
	for _, l := range configLines(t, path) {
		r := Row{Line: l.line}
		for _, m := range nameRE.FindAllStringSubmatch(l.cells[0], -1) {
			r.Names = append(r.Names, m[1])
		}
		require.NotEmpty(t, r.Names, "%s: %s", path, l.line)
		r.UsedBy, r.Runtime = usedBy(t, strings.TrimSpace(l.cells[2]), l.line)
		rows = append(rows, r)
	}
	return rows
}

// configLine is one row of a configuration table, and its cells.
type configLine struct {
	line  string
	cells []string
}

// configLines reads the rows of the table under "## Configuration" of the
// Markdown file at path: variable, default, used by, meaning.
func configLines(t testing.TB, path string) []configLine {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), path))
	require.NoError(t, err)
	var lines []configLine
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = strings.TrimSpace(line) == "## Configuration"
		case in && strings.HasPrefix(line, "| `"):
			cells := strings.Split(strings.Trim(line, "|"), " | ")
			require.GreaterOrEqual(t, len(cells), 4, "%s: a row of variable, default, used by, meaning: %s", path, line)
			lines = append(lines, configLine{line: line, cells: cells})
		}
	}
	require.NotEmpty(t, lines, "no configuration table in %s", path)
	return lines
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
// asked for, and (as [cli.RecordDefaults]' function) every default a
// variable was read with.
type Recorder struct {
	mu   sync.Mutex
	env  map[string]string
	read map[string]bool
	defs map[string][]any
}

// NewRecorder returns a Recorder answering from env (nil: nothing is set).
func NewRecorder(env map[string]string) *Recorder {
	return &Recorder{env: env, read: map[string]bool{}, defs: map[string][]any{}}
}

// Default remembers that name was read with the default def.
func (r *Recorder) Default(name string, def any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.defs[name], def) {
		r.defs[name] = append(r.defs[name], def)
	}
}

// Defaults returns the defaults each variable was read with: one each,
// unless the code reads a variable with two defaults.
func (r *Recorder) Defaults() map[string][]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]any, len(r.defs))
	for n, d := range r.defs {
		out[n] = slices.Clone(d)
	}
	return out
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
// and then [Check]s what it read and [CheckDefaults] the defaults it read
// with.
func CheckHelp(t testing.TB, binary string, run cli.Run, extra ...string) {
	t.Helper()
	rec := NewRecorder(nil)
	ctx := cli.RecordDefaults(context.Background(), rec.Default)
	runs := [][]string{{binary, "--help"}}
	for _, c := range extra {
		runs = append(runs, []string{binary, c, "--help"})
	}
	for _, args := range runs {
		require.Equal(t, 0, run(ctx, args, rec.Getenv, io.Discard, io.Discard), "%v", args)
	}
	Check(t, binary, rec.Read())
	CheckDefaults(t, binary, rec.Read(), rec.Defaults())
}

// DefaultDocs are the documents whose configuration tables' default
// column CheckDefaults compares.
var DefaultDocs = []string{"docs/operations.md", "README.md"}

// CheckDefaults compares the default column of the configuration tables of
// [DefaultDocs] with defs, the defaults binary's configuration read each
// variable with (read: every variable it read). A variable the code reads
// with two defaults fails. A cell (or, for a row of several variables, its
// comma-separated part for each) is compared when it is "empty" or "unset"
// (the default is ""), "off" (the default is zero: "", 0, false), or one
// literal in backquotes, alone or followed by " (…)" or ": …" (`0`: 2 ×
// `WORKER_CONCURRENCY` says 0); a literal is read as the default's type
// (a duration, an integer, a bool). Other cells (prose such as `true` when
// …, else `false`; another variable's name; a link) say what no constant
// holds and are not compared. A variable documented with a literal default
// but read without one (a bare getenv) fails: its default is not where the
// check can see it.
func CheckDefaults(t testing.TB, binary string, read []string, defs map[string][]any) {
	t.Helper()
	for n, d := range defs {
		require.Len(t, d, 1, "%s reads %s with two defaults: %v", binary, n, d)
	}
	for _, path := range DefaultDocs {
		for _, r := range defaultRows(t, path) {
			for n, cell := range r.cells {
				if !slices.Contains(read, n) {
					continue
				}
				want, kind := docDefault(cell)
				if kind == skip {
					continue
				}
				d, ok := defs[n]
				if !ok {
					if kind == literal {
						require.Failf(t, "default not seen", "%s: %s documents %s's default as %q, and %s reads it without one (a bare getenv): read it through cli.Env with its exported default", path, binary, n, want, binary)
					}
					continue // empty, unset, off: a bare getenv's ""
				}
				require.NoError(t, matchDefault(d[0], want, kind), "%s: the default of %s (%s reads it with %v): %s", path, n, binary, d[0], r.line)
			}
		}
	}
}

type cellKind int

const (
	skip cellKind = iota
	literal
	empty // "empty", "unset": ""
	off   // the zero value
)

var (
	literalRE = regexp.MustCompile("^`([^`]*)`(?:\\s*\\(.*\\)|:.*)?$")
	varRE     = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`) // another variable's name
)

// docDefault reads one default cell (or part of one).
func docDefault(cell string) (string, cellKind) {
	cell = strings.TrimSpace(cell)
	switch cell {
	case "empty", "unset":
		return "", empty
	case "off":
		return "", off
	}
	m := literalRE.FindStringSubmatch(cell)
	if m == nil || varRE.MatchString(m[1]) {
		return "", skip
	}
	return m[1], literal
}

// matchDefault reports whether the code's default def is the documented one.
func matchDefault(def any, want string, kind cellKind) error {
	if kind == empty || kind == off {
		zero := def == "" || def == 0 || def == false || def == time.Duration(0)
		if (kind == empty && def != "") || !zero {
			return fmt.Errorf("documented %s, the code's is %v", map[cellKind]string{empty: "empty", off: "off"}[kind], def)
		}
		return nil
	}
	var got any
	var err error
	switch def.(type) {
	case time.Duration:
		got, err = time.ParseDuration(want)
	case int:
		got, err = strconv.Atoi(want)
	case bool:
		got, err = strconv.ParseBool(want)
	case float64:
		got, err = strconv.ParseFloat(want, 64)
	default:
		got = want
	}
	if err != nil || got != def {
		return fmt.Errorf("documented %q, the code's is %v", want, def)
	}
	return nil
}

// defaultRow is one row of a configuration table: each variable's default
// cell.
type defaultRow struct {
	cells map[string]string
	line  string
}

// defaultRows reads the default column of the table under "## Configuration"
// of the Markdown file at path. A row of several variables pairs them with
// the comma-separated parts of its cell, or, when the cell is one part,
// gives each the whole cell; a name ending in _* (README's WEBHOOK_*) is
// left out.
func defaultRows(t testing.TB, path string) []defaultRow {
	t.Helper()
	var rows []defaultRow
	for _, l := range configLines(t, path) {
		var names []string
		for _, m := range nameRE.FindAllStringSubmatch(l.cells[0], -1) {
			names = append(names, m[1])
		}
		parts := strings.Split(l.cells[1], ", ")
		r := defaultRow{cells: map[string]string{}, line: l.line}
		for i, n := range names {
			switch {
			case len(parts) == len(names):
				r.cells[n] = parts[i]
			case len(parts) == 1:
				r.cells[n] = l.cells[1]
			}
		}
		rows = append(rows, r)
	}
	return rows
}

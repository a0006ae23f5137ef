package cmdline

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args           []string
		code           int
		ok             bool
		stdout, stderr string
	}{
		{[]string{"--n", "3"}, 0, true, "", ""},
		{[]string{"--help"}, 0, false, "usage\n", ""},
		{[]string{"--n", "x"}, 2, false, "", "tool: invalid value \"x\" for flag -n: parse error\n"},
		{[]string{"--nope"}, 2, false, "", "tool: flag provided but not defined: -nope\n"},
		{[]string{"--n", "3", "now", "later"}, 2, false, "", "tool: unexpected arguments [\"now\" \"later\"]; see tool --help\n"},
	} {
		fs := flag.NewFlagSet("tool", flag.ContinueOnError)
		n := fs.Int("n", 1, "")
		var stdout, stderr bytes.Buffer
		code, ok := Parse(fs, tc.args, "usage\n", &stdout, &stderr)
		require.Equal(t, tc.code, code, "%v", tc.args)
		require.Equal(t, tc.ok, ok, "%v", tc.args)
		require.Equal(t, tc.stdout, stdout.String(), "%v", tc.args)
		require.Equal(t, tc.stderr, stderr.String(), "%v", tc.args)
		if ok {
			require.Equal(t, 3, *n)
		}
	}
}

// With --bin, Binaries builds nothing and wants an executable for every package.
func TestPrebuiltBinaries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "api"), []byte("#!/bin/sh\n"), 0o755))
	logf := func(format string, args ...any) { t.Errorf("nothing to build, yet: "+format, args...) }

	b, err := Binaries(t.Context(), dir, "", logf, "./cmd/api")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "api"), b.Path("api"))

	_, err = Binaries(t.Context(), dir, "", logf, "./cmd/api", "./cmd/worker")
	require.EqualError(t, err, "no worker binary in "+dir)
	require.FileExists(t, filepath.Join(dir, "api"), "a --bin directory is the caller's, never removed")
}

package cmdline

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

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

// A --bin that is set must be a directory; unset, the binaries are built.
func TestCheckBinDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "api")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	require.NoError(t, CheckBinDir(""))
	require.NoError(t, CheckBinDir(dir))
	require.EqualError(t, CheckBinDir(file), fmt.Sprintf("--bin %q: not a directory", file))
	require.EqualError(t, CheckBinDir(filepath.Join(dir, "none")), fmt.Sprintf("--bin %q: not a directory", filepath.Join(dir, "none")))
}

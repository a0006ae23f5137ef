package cmdline

import (
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

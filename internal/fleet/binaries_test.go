package fleet

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// --bin: unset, the binaries are built; set, it must be a directory, from
// which Binaries builds nothing and which must hold an executable for every
// package.
func TestBinDir(t *testing.T) {
	t.Parallel()
	require.NoError(t, CheckBinDir(""))
	dir := t.TempDir()
	api := filepath.Join(dir, "api")
	require.NoError(t, os.WriteFile(api, []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, CheckBinDir(dir))
	for _, bad := range []string{api, filepath.Join(dir, "none")} {
		require.EqualError(t, CheckBinDir(bad), fmt.Sprintf("--bin %q: not a directory", bad))
	}

	logf := func(format string, args ...any) { t.Errorf("nothing to build, yet: "+format, args...) }
	b, err := Binaries(t.Context(), dir, "", logf, "./cmd/api")
	require.NoError(t, err)
	require.Equal(t, api, b.Path("api"))

	_, err = Binaries(t.Context(), dir, "", logf, "./cmd/api", "./cmd/worker")
	require.EqualError(t, err, "no worker binary in "+dir)
	require.FileExists(t, api, "a --bin directory is the caller's, never removed")
}

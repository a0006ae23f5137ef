package devdb

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Program finds a program on PATH first, and names the program it cannot
// find; ProgramVersion runs it with --version.
func TestProgram(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "labels-test-program")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho \"labels-test-program (PostgreSQL) 15.1\"\n"), 0o755))
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))

	p, err := Program("labels-test-program")
	require.NoError(t, err)
	require.Equal(t, script, p)
	require.Equal(t, "labels-test-program (PostgreSQL) 15.1", ProgramVersion(p))
	require.Empty(t, ProgramVersion(filepath.Join(dir, "absent")))

	_, err = Program("labels-absent-program")
	require.ErrorContains(t, err, "labels-absent-program not found")
}

// Without it on PATH, a server program is found beside initdb.
func TestProgramBesideServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	bin, err := BinDir()
	if err != nil {
		t.Skip(err)
	}
	p, err := Program("initdb")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(bin, "initdb"), p)
}

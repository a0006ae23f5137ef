package main

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/envdoc"
)

// Every variable the worker's configuration reads is in docs/operations.md's
// table for worker, and every row for worker is read. --help stops after the
// configuration is read, before anything starts.
func TestConfigMatchesTheTable(t *testing.T) {
	t.Parallel()
	rec := envdoc.NewRecorder(nil)
	require.Equal(t, 0, run(context.Background(), []string{"worker", "--help"}, rec.Getenv, io.Discard, io.Discard))
	envdoc.Check(t, "worker", rec.Read())
}

package main

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/envdoc"
)

// Every variable reconcile's configuration reads (its run and reconcile
// void) is in docs/operations.md's table for reconcile, and every row for
// reconcile is read. --help stops after the configuration is read.
func TestConfigMatchesTheTable(t *testing.T) {
	t.Parallel()
	rec := envdoc.NewRecorder(nil)
	require.Equal(t, 0, run(context.Background(), []string{"reconcile", "--help"}, rec.Getenv, io.Discard, io.Discard))
	require.Equal(t, 0, run(context.Background(), []string{"reconcile", "void", "--help"}, rec.Getenv, io.Discard, io.Discard))
	envdoc.Check(t, "reconcile", rec.Read())
}

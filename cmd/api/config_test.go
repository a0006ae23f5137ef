package main

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/envdoc"
)

// Every variable the API's configuration reads is in docs/operations.md's
// table for api, and every row for api is read. --help stops after the
// configuration is read, before anything starts.
func TestConfigMatchesTheTable(t *testing.T) {
	t.Parallel()
	rec := envdoc.NewRecorder(nil)
	require.Equal(t, 0, run(context.Background(), []string{"api", "--help"}, rec.Getenv, io.Discard, io.Discard))
	envdoc.Check(t, "api", rec.Read())
}

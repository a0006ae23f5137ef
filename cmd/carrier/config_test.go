package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/internal/testutil/envdoc"
)

// Every variable the simulator's configuration reads (serving, and carrier
// invoice) is in docs/operations.md's table for carrier, and every row for
// carrier is read; each setting's flag is named after its variable, as
// docs/carrier.md says.
func TestConfigMatchesTheTable(t *testing.T) {
	t.Parallel()
	rec := envdoc.NewRecorder(nil)
	ctx := cli.RecordDefaults(context.Background(), rec.Default)
	// A bad flag value stops it after every variable was read.
	require.Equal(t, exitUsage, run(ctx, []string{"carrier", "--addr", "no port"}, rec.Getenv, io.Discard, io.Discard))
	out := filepath.Join(t.TempDir(), "invoice.csv")
	require.Equal(t, exitOK, run(ctx, []string{"carrier", "invoice", "--day", "2026-12-01", "--lines", "1", "--out", out}, rec.Getenv, io.Discard, io.Discard))
	envdoc.Check(t, "carrier", rec.Read())
	envdoc.CheckDefaults(t, "carrier", rec.Read(), rec.Defaults())

	var cfg Config
	for _, s := range serveSettings(&cfg) {
		want := strings.TrimPrefix(strings.TrimPrefix(s.env, "SIM_"), "CARRIER_")
		require.Equal(t, strings.ReplaceAll(strings.ToLower(want), "_", "-"), s.flag, "the flag of %s", s.env)
	}
}

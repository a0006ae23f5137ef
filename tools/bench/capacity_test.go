package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/tools/bench/internal/capacity"
)

func TestCapacityFlags(t *testing.T) {
	t.Parallel()
	getenv := func(string) string { return "" }
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"bench", "capacity", "--help"}, getenv, &stdout, &stderr))
	require.Contains(t, stdout.String(), "--records")

	for _, args := range [][]string{
		{"--records", "10"},
		{"--records", "x"},
		{"--sweep-batches", "1000,zero"},
		{"--sweep-batches", "0"},
		{"--clients", "0"},
		{"--rate", "-1"},
		{"extra"},
	} {
		stderr.Reset()
		code := run(context.Background(), append([]string{"bench", "capacity"}, args...), getenv, &stdout, &stderr)
		require.Equal(t, 2, code, "%v", args)
		require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line for %v: %q", args, stderr.String())
	}
}

// TestReportFileIsWritten checks --out through run with the smallest fill.
func TestCapacityReportFileIsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a scratch database")
	}
	t.Parallel()
	out := filepath.Join(t.TempDir(), "capacity.json")
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return dbtest.AdminURL(t)
		}
		return ""
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench", "capacity", "--records", "300", "--live", "30", "--pipeline", "20",
		"--sweep-batches", "100", "--clients", "2", "--rate", "100", "--load-seconds", "200ms", "--saturation", "200ms", "--out", out}, getenv, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var rep capacity.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Equal(t, 300, rep.Records)
	require.Equal(t, int64(300), rep.Purges[0].Deleted)
	require.Contains(t, rep.Command, "--records 300")
	require.Contains(t, stdout.String(), "6. At 10x the seed's peak")
}

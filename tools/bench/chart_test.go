package main

import (
	"encoding/json"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The chart of a saved run renders from its JSON, titled with the run's date
// and machine (RENDER_CHART=path keeps a copy to look at).
func TestChartOfSavedResults(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/results-2026-12-03.json")
	require.NoError(t, err)
	var r Results
	require.NoError(t, json.Unmarshal(b, &r))
	require.Equal(t, "labels bench 2026-12-03 (full run) · 2 × Intel(R) Xeon(R) Processor @ 2.80GHz, 24 GiB · PostgreSQL 15.20 · go1.26.8", ChartTitle(&r))

	path := filepath.Join(t.TempDir(), "chart.png")
	if p := os.Getenv("RENDER_CHART"); p != "" {
		path = p
	}
	img := render(t, path, &r)
	require.Equal(t, 1280, img.Bounds().Dx(), "960 points at 96 dpi")
	require.InDelta(t, 667, img.Bounds().Dy(), 1)

	// A run with paced phases gets a third plot, their latencies against the
	// rate: the chart widens by a plot.
	for _, rate := range []float64{400, 2000} {
		r.Paced = append(r.Paced, PacedRun{Rate: rate, Through: Through{Submit: LoadRun{Latency: Latency{P50: 3, P99: 20}}, ToFinal: Latency{P50: 90, P99: 300}},
			Pgbench: &PgbenchRun{Latency: Latency{P50: 2, P99: 9}}})
	}
	require.Equal(t, 1920, render(t, path, &r).Bounds().Dx(), "three plots of 480 points at 96 dpi")

	// Paced phases alone: their plot, as wide as two.
	r.Ceiling, r.Accept, r.AcceptLive = nil, nil, nil
	require.Equal(t, 1280, render(t, path, &r).Bounds().Dx())
}

// render draws r's chart to path and decodes it.
func render(t *testing.T, path string, r *Results) image.Image {
	t.Helper()
	require.NoError(t, Chart(path, r))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	return img
}

package cli

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// The services collect less often unless GOGC says otherwise, in which case
// Go has applied it already and TuneGC leaves it alone.
func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)

	TuneGC(func(string) string { return "" })
	require.Equal(t, GCPercent, debug.SetGCPercent(100))

	TuneGC(func(k string) string {
		if k == "GOGC" {
			return "50"
		}
		return ""
	})
	require.Equal(t, 100, debug.SetGCPercent(100), "GOGC set: untouched")
}

// A *_BATCH of 0 turns the shared statements off; any other value is the
// batch size the libraries take as it is.
func TestBatch(t *testing.T) {
	require.Equal(t, -1, Batch(0))
	require.Equal(t, 64, Batch(64))
	require.Equal(t, 1, Batch(1))
}

package sim_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier/sim"
)

// withStateFile serves a simulator that keeps its state in a new file, and
// returns the file's path.
func withStateFile(t *testing.T) (*testBundle, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "carrier.jsonl")
	return setup(t, &sim.Options{StateFile: path}), path
}

// restart closes b's simulator and serves a new one on its state file.
func (b *testBundle) restart(t *testing.T, path string) *testBundle {
	t.Helper()
	require.NoError(t, b.sim.Close())
	return setup(t, &sim.Options{StateFile: path})
}

func TestStateFile(t *testing.T) {
	t.Parallel()

	t.Run("PurchasesSurviveARestart", func(t *testing.T) {
		t.Parallel()
		b, path := withStateFile(t)
		first := b.mustBuy(t, "k1", purchase(1, "51147"))
		b.mustBuy(t, "k2", purchase(1, "51147"))
		before := b.sim.Purchases()
		b2 := b.restart(t, path)
		require.Equal(t, before, b2.sim.Purchases())
		require.Equal(t, map[string]int{"k1": 1, "k2": 1}, b2.sim.Stats().ByKey)

		again := b2.mustBuy(t, "k1", purchase(1, "51147"))
		require.True(t, again.Replayed, "the key is remembered across the restart")
		require.Equal(t, first.CarrierLabelID, again.CarrierLabelID)

		next := b2.mustBuy(t, "k3", purchase(1, "51147"))
		require.Equal(t, "CL-3", next.CarrierLabelID)
		require.Equal(t, "GRD000000001-3", next.TrackingNo, "tracking numbers stay unique across the restart")
	})

	t.Run("ResetEmptiesItButKeepsCounting", func(t *testing.T) {
		t.Parallel()
		b, path := withStateFile(t)
		b.mustBuy(t, "k1", purchase(1, "51147"))
		require.NoError(t, b.sim.Reset())
		b2 := b.restart(t, path)
		require.Empty(t, b2.sim.Purchases())
		l := b2.mustBuy(t, "k1", purchase(1, "51147"))
		require.False(t, l.Replayed)
		require.Equal(t, "CL-2", l.CarrierLabelID)
	})

	t.Run("ALastLineCutShortIsDropped", func(t *testing.T) {
		t.Parallel()
		b, path := withStateFile(t)
		b.mustBuy(t, "k1", purchase(1, "51147"))
		require.NoError(t, b.sim.Close())
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString(`{"purchase":{"carrier_label_id":"CL-2","tra`)
		require.NoError(t, err)
		require.NoError(t, f.Close())

		b2 := setup(t, &sim.Options{StateFile: path})
		require.Len(t, b2.sim.Purchases(), 1)
		b2.mustBuy(t, "k2", purchase(2, "51147"))
		require.NoError(t, b2.sim.Close())

		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, 2, strings.Count(string(raw), "\n"))
		require.NotContains(t, string(raw), `"tra{`)
		b3 := setup(t, &sim.Options{StateFile: path})
		require.Len(t, b3.sim.Purchases(), 2)
	})

	t.Run("ACorruptLineIsAnError", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "carrier.jsonl")
		require.NoError(t, os.WriteFile(path, []byte("{not json}\n"), 0o644))
		_, err := sim.New(&sim.Options{StateFile: path})
		require.ErrorContains(t, err, "line 1")

		require.NoError(t, os.WriteFile(path, []byte(`{"purchase":{"carrier_label_id":"X-1"}}`+"\n"), 0o644))
		_, err = sim.New(&sim.Options{StateFile: path})
		require.ErrorContains(t, err, "CL-<n>")
	})
}

package worker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/worker"
)

// A zero Config takes the exported defaults, and WithDefaults applied again
// changes nothing (a negative RelayBacklog stays "no bound").
func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	c := worker.Config{}.WithDefaults()
	require.Equal(t, worker.DefaultLeaseDuration, c.LeaseDuration)
	require.Equal(t, worker.DefaultCarrierTimeout, c.CarrierTimeout)
	require.Equal(t, worker.RelayBacklogPerSlot*worker.DefaultConcurrency, c.RelayBacklog)
	require.Equal(t, c, c.WithDefaults())
	unbounded := worker.Config{RelayBacklog: -1}.WithDefaults()
	require.Equal(t, -1, unbounded.WithDefaults().RelayBacklog)
}

package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/jobs"
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
	require.Equal(t, worker.DefaultRelayLinger, c.RelayLinger)
	require.Equal(t, c, c.WithDefaults())
	unbounded := worker.Config{RelayBacklog: -1}.WithDefaults()
	require.Equal(t, -1, unbounded.WithDefaults().RelayBacklog)
}

// The quiet queues poll at jobs.QuietFetchPollInterval by default, never
// faster than the busy ones, and as fast as a test's FetchPollInterval
// below its default.
func TestQuietQueuesPoll(t *testing.T) {
	t.Parallel()
	c := worker.Config{}.WithDefaults()
	require.Equal(t, jobs.FetchPollInterval, c.FetchPollInterval)
	require.Equal(t, jobs.QuietFetchPollInterval, c.QuietFetchPollInterval)
	slow := worker.Config{FetchPollInterval: 5 * time.Second}.WithDefaults()
	require.Equal(t, 5*time.Second, slow.QuietFetchPollInterval)
	fast := worker.Config{FetchPollInterval: 50 * time.Millisecond}.WithDefaults()
	require.Equal(t, 50*time.Millisecond, fast.QuietFetchPollInterval)
	require.Equal(t, fast, fast.WithDefaults())
}

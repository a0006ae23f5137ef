package stacktest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/outbox"
)

// defaults fills in the worker settings both stacks share: a 30 s lease, a
// 5 s carrier timeout, 5 carrier attempts, a 10 ms retry base.
func defaults(lease, carrierTimeout *time.Duration, attempts *int, retryBase *time.Duration) {
	if *lease == 0 {
		*lease = 30 * time.Second
	}
	if *carrierTimeout == 0 {
		*carrierTimeout = 5 * time.Second
	}
	if *attempts == 0 {
		*attempts = 5
	}
	if *retryBase == 0 {
		*retryBase = 10 * time.Millisecond
	}
}

// startWorker starts what cmd/worker runs for labels, tuned for tests: River
// with the buy_label worker cfg (fast fetches and retries) and the relay,
// which runs in wg until ctx ends.
func startWorker(t testing.TB, ctx context.Context, wg *sync.WaitGroup, pool *pgxpool.Pool, cfg jobs.BuyLabelConfig,
	retryBase time.Duration, listener *notify.Listener) (*river.Client[pgx.Tx], *outbox.Relay) {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, jobs.NewBuyLabelWorker(cfg))
	jobTimeout, rescueAfter := jobs.RiverTimings(cfg.LeaseDuration)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:               map[string]river.QueueConfig{jobs.QueueLabels: {MaxWorkers: 20}},
		Workers:              workers,
		JobTimeout:           jobTimeout,
		RescueStuckJobsAfter: rescueAfter,
		MaxAttempts:          cfg.MaxAttempts + 10,
		RetryPolicy:          &jobs.RetryPolicy{Base: retryBase, Max: 10 * retryBase},
		FetchCooldown:        20 * time.Millisecond,
		FetchPollInterval:    50 * time.Millisecond,
		TestOnly:             true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	relay := outbox.NewRelay(pool, jobs.DispatchBuyLabels(client), cfg.Log, &outbox.RelayOpts{Listener: listener, PollInterval: 100 * time.Millisecond})
	wg.Go(func() { relay.Run(ctx) })
	return client, relay
}

package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/worker"
)

// One key row held by a stranger (a session frozen inside its transaction)
// delays only its own job: the 300 other pending intents of the same shared
// lease statements are bought while the lock is held, and the held one
// follows once it is gone.
func TestLockedKeyRowDelaysOnlyItsJob(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("fulfilment")
	const n = 301
	for i := range n {
		s.Accept(tok, fmt.Sprintf("k%d", i), stacktest.ParcelBody(int64(1000+i), 1, 100))
	}
	ctx := context.Background()
	tx, err := s.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `SELECT 1 FROM idempotency_keys WHERE idem_key = 'k0' FOR UPDATE`)
	require.NoError(t, err)

	w, err := worker.New(worker.Config{Pool: s.Pool, Carrier: s.Carrier, CarrierTimeout: 5 * time.Second, LeaseDuration: 30 * time.Second,
		Concurrency: 50, SweepInterval: -1, RetryBase: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond, FetchCooldown: 20 * time.Millisecond,
		RelayPollInterval: 100 * time.Millisecond, Log: zerolog.Nop(), TestOnly: true})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	final := func() (done, heldDone int) {
		require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status <> 'pending'),
			count(*) FILTER (WHERE status <> 'pending' AND idem_key = 'k0') FROM label_intents`).Scan(&done, &heldDone))
		return done, heldDone
	}
	// Polled up to a minute: with the shared statement waiting for the
	// lock, nothing would finish before the lock goes.
	deadline := time.Now().Add(time.Minute)
	for done, _ := final(); done < n-1 && time.Now().Before(deadline); done, _ = final() {
		time.Sleep(50 * time.Millisecond)
	}
	done, heldDone := final()
	require.Equal(t, n-1, done, "every intent but the locked one is final while the lock is held")
	require.Zero(t, heldDone)

	require.NoError(t, tx.Rollback(ctx))
	for done < n && time.Now().Before(deadline.Add(time.Minute)) {
		time.Sleep(50 * time.Millisecond)
		done, _ = final()
	}
	require.Equal(t, n, done, "the locked one follows once the lock is gone")
	_, total := s.Carrier.Purchases("")
	require.Equal(t, n, total)
}

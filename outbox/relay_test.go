package outbox_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/dbtest"
	"github.com/labelkit/labels/internal/fixture"
	"github.com/labelkit/labels/internal/stacktest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/outbox"
)

// Two relays draining the same outbox at once dispatch every intent exactly
// once: the relays' own counts add up to the intents, and each intent has one job.
func TestTwoRelaysNeverDoubleDispatch(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("fulfilment")
	const n = 120
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := s.Create(tok, fmt.Sprintf("k-%d", i), stacktest.ParcelBody(int64(1000+i), 1, 100))
			require.Equal(t, http.StatusAccepted, r.Status)
		})
	}
	wg.Wait()

	client, err := river.NewClient(riverpgxv5.New(s.Pool), &river.Config{})
	require.NoError(t, err)
	var dispatched atomic.Int64
	var calls atomic.Int64
	dispatch := jobs.DispatchBuyLabels(client)
	counting := func(ctx context.Context, tx pgx.Tx, ids []string) error {
		calls.Add(1)
		return dispatch(ctx, tx, ids)
	}
	ctx := context.Background()
	var rg sync.WaitGroup
	for range 2 {
		relay := outbox.NewRelay(s.Pool, counting, zerolog.Nop(), &outbox.RelayOpts{
			BatchSize:      7,
			OnDispatchFunc: func(k int) { dispatched.Add(int64(k)) },
		})
		rg.Go(func() {
			for {
				k, err := relay.DispatchBatch(ctx)
				require.NoError(t, err)
				if k == 0 {
					return
				}
			}
		})
	}
	rg.Wait()
	require.Equal(t, int64(n), dispatched.Load())
	require.GreaterOrEqual(t, calls.Load(), int64(n/7))
	var jobsN, distinct, undispatched int
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT args->>'request_id') FROM river_job WHERE kind = 'buy_label'`).Scan(&jobsN, &distinct))
	require.Equal(t, n, jobsN)
	require.Equal(t, n, distinct)
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*) FROM label_intents WHERE dispatched_at IS NULL`).Scan(&undispatched))
	require.Zero(t, undispatched)

	// Dispatching an intent again (say a relay crashed after inserting, before
	// its commit was acknowledged) adds no second job: jobs are unique by request id.
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var id string
		if err := tx.QueryRow(ctx, `SELECT request_id FROM label_intents LIMIT 1`).Scan(&id); err != nil {
			return err
		}
		return dispatch(ctx, tx, []string{id})
	})
	require.NoError(t, err)
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'buy_label'`).Scan(&jobsN))
	require.Equal(t, n, jobsN)
}

// The relay's plans, made on an emptied intents table whose statistics say
// it is full of dispatched intents (every end-to-end run of tools/bench; a
// store emptied or restored), take the undispatched intents through their
// partial index and mark them through the primary key: the mark's plan made
// so without the relay's settings read the whole table for every batch (the
// "mark" subtest fails without them; "take" guards the partial index).
func TestRelayPlansProbeOnEmptyTables(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	conn := fixture.EmptiedFullStore(t, pool)
	// A cached statement goes generic after five runs when the generic plan
	// is no dearer; the test explains that plan.
	settings := outbox.SQLRelaySettings + `, set_config('plan_cache_mode', 'force_generic_plan', true)`
	t.Run("take", func(t *testing.T) {
		// A walk, but of the partial index that holds only undispatched intents.
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // only explains
		_, err = tx.Exec(ctx, settings)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `PREPARE relay_take(int) AS `+outbox.SQLRelayTake)
		require.NoError(t, err)
		defer conn.Exec(ctx, `DEALLOCATE relay_take`) //nolint:errcheck // absent when PREPARE failed
		var plan string
		require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE relay_take(500)`).Scan(&plan))
		require.Contains(t, plan, `"Index Name": "label_intents_undispatched"`)
		require.NotContains(t, plan, `Seq Scan`)
	})
	t.Run("mark", func(t *testing.T) {
		dbtest.RequireProbes(t, conn, settings, nil, outbox.SQLRelayMark, []string{"text[]"}, []string{"'{lr_1,lr_2}'"}, "label_intents")
	})
}

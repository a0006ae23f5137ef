package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/internal/testutil/clocktest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/outbox"
	"github.com/labelkit/labels/postgres"
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
			s.Accept(tok, fmt.Sprintf("k-%d", i), stacktest.ParcelBody(int64(1000+i), 1, 100))
		})
	}
	wg.Wait()

	client, err := river.NewClient(riverpgxv5.New(s.Pool), &river.Config{})
	require.NoError(t, err)
	var dispatched atomic.Int64
	var calls atomic.Int64
	dispatch := outbox.InsertBuyLabels(client)
	counting := func(ctx context.Context, tx pgx.Tx, ids []string, meta [][]byte) error {
		calls.Add(1)
		return dispatch(ctx, tx, ids, meta)
	}
	ctx := context.Background()
	var rg sync.WaitGroup
	for range 2 {
		relay := outbox.NewRelayInserting(s.Pool, counting, zerolog.Nop(), &outbox.RelayOpts{
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
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*) FROM label_intent_outbox`).Scan(&undispatched))
	require.Zero(t, undispatched)

	// Dispatching an intent again (say a relay crashed after inserting, before
	// its commit was acknowledged) adds no second job: jobs are unique by request id.
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var id string
		if err := tx.QueryRow(ctx, `SELECT request_id FROM label_intents LIMIT 1`).Scan(&id); err != nil {
			return err
		}
		return dispatch(ctx, tx, []string{id}, nil)
	})
	require.NoError(t, err)
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'buy_label'`).Scan(&jobsN))
	require.Equal(t, n, jobsN)
}

// A relay woken by a notification lingers before it dispatches: the intents
// accepted meanwhile go out in one transaction when the linger ends. The
// linger's timer is the test's.
func TestRelayLingersAfterANotification(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("fulfilment")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	l := notify.NewListener(s.Pool.Config().ConnConfig.Copy(), zerolog.Nop(), notify.ChannelIntents)
	connected, unsubscribe := l.Subscribe(notify.ChannelIntents, "")
	defer unsubscribe()
	go l.Run(ctx)
	<-connected // the listener listens: later accepts wake the relay

	client, err := river.NewClient(riverpgxv5.New(s.Pool), &river.Config{})
	require.NoError(t, err)
	insert := outbox.InsertBuyLabels(client)
	var inserts []int
	counting := func(ctx context.Context, tx pgx.Tx, ids []string, meta [][]byte) error {
		inserts = append(inserts, len(ids)) // the relay's goroutine only
		return insert(ctx, tx, ids, meta)
	}
	ft := clocktest.NewTimer()
	dispatched := make(chan int, 10)
	relay := outbox.NewRelayInserting(s.Pool, counting, zerolog.Nop(), &outbox.RelayOpts{
		Listener: l, PollInterval: time.Hour, Linger: time.Hour, Timer: ft.Start,
		OnDispatchFunc: func(n int) { dispatched <- n },
	})
	s.Accept(tok, "k-0", stacktest.ParcelBody(1000, 1, 100))
	done := make(chan struct{})
	go func() { relay.Run(ctx); close(done) }()
	require.Equal(t, 1, <-dispatched, "the first dispatch runs at once")

	s.Accept(tok, "k-1", stacktest.ParcelBody(1001, 1, 100))
	select {
	case d := <-ft.Started:
		require.Equal(t, time.Hour, d)
	case n := <-dispatched:
		t.Fatalf("dispatched %d on the notification without lingering", n)
	}
	s.Accept(tok, "k-2", stacktest.ParcelBody(1002, 1, 100))
	ft.Expire()
	require.Equal(t, 2, <-dispatched, "the intents accepted during the linger go out together")
	cancel()
	<-done
	require.Equal(t, []int{1, 2}, inserts)
}

// The relay of webhook events is woken by the notification of a completion
// that wrote an event: its poll here is an hour away.
func TestEventRelayIsWokenByACompletionThatWroteAnEvent(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("hooked")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	complete := func(key string, order int64) {
		r := s.Accept(tok, key, stacktest.ParcelBody(order, 1, 100))
		var caller string
		require.NoError(t, s.Pool.QueryRow(ctx, `SELECT caller_id FROM label_intents WHERE request_id = $1`, r.ID).Scan(&caller))
		lease := uuid.New()
		leased, err := postgres.TakeLeases(ctx, s.Pool, []postgres.LeaseRow{{RequestID: r.ID, Token: lease}}, time.Minute)
		require.NoError(t, err)
		require.Equal(t, postgres.Leased, leased[0].Result)
		p := labels.NewProblem(labels.CodeCarrierRejected, "rejected")
		done, err := postgres.Complete(ctx, s.Pool, []postgres.Completion{{RequestID: r.ID, CallerID: caller, Key: key,
			Token: lease, Status: p.Status, Body: p.Body()}}, time.Hour)
		require.NoError(t, err)
		require.Equal(t, []postgres.CompleteResult{postgres.Completed}, done)
		_, err = s.Pool.Exec(ctx, `INSERT INTO webhook_endpoints (caller_id, url) VALUES ($1, 'https://hooks.example/')
		                           ON CONFLICT DO NOTHING`, caller)
		require.NoError(t, err)
	}
	complete("k-0", 2000) // before the endpoint: no event
	complete("k-1", 2001) // an event

	l := notify.NewListener(s.Pool.Config().ConnConfig.Copy(), zerolog.Nop(), notify.ChannelWebhookEvents)
	connected, unsubscribe := l.Subscribe(notify.ChannelWebhookEvents, "")
	defer unsubscribe()
	go l.Run(ctx)
	<-connected
	dispatched := make(chan int, 10)
	relay := outbox.NewEventRelayInserting(s.Pool, func(context.Context, pgx.Tx, []string, [][]byte) error { return nil },
		zerolog.Nop(), &outbox.RelayOpts{Listener: l, PollInterval: time.Hour, OnDispatchFunc: func(n int) { dispatched <- n }})
	done := make(chan struct{})
	go func() { relay.Run(ctx); close(done) }()
	require.Equal(t, 1, <-dispatched, "the first dispatch runs at once")
	complete("k-2", 2002)
	select {
	case n := <-dispatched:
		require.Equal(t, 1, n)
	case <-ctx.Done():
		t.Fatal("the relay of webhook events was not woken by the completion's notification")
	}
	cancel()
	<-done
}

package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/clocktest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/outbox"
)

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

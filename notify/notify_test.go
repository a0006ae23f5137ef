package notify_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/notify"
)

// Values notified separately reach their own subscribers, coalesced into few
// NOTIFYs; a wildcard subscriber hears every one.
func TestNotifierReachesSubscribers(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := notify.NewListener(pool.Config().ConnConfig.Copy(), zerolog.Nop(), notify.ChannelFinal)
	// Subscribed before the listener starts, the wildcard subscriber is woken
	// when the listener has connected and listens.
	any, unsubscribe := l.Subscribe(notify.ChannelFinal, "")
	defer unsubscribe()
	go l.Run(ctx)
	select {
	case <-any:
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not connect")
	}

	// 1,000 request ids do not fit one payload: they go out in several chunks.
	ids := make([]string, 1000)
	subs := make([]<-chan struct{}, len(ids))
	for i := range ids {
		ids[i] = fmt.Sprintf("lr_%026d", i)
		ch, unsubscribe := l.Subscribe(notify.ChannelFinal, ids[i])
		defer unsubscribe()
		subs[i] = ch
	}

	n := notify.NewNotifier(pool, 5*time.Millisecond, zerolog.Nop())
	go n.Run(ctx)
	for _, id := range ids {
		n.Notify(notify.ChannelFinal, id)
	}
	for i, ch := range subs {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("subscriber of %s was not woken", ids[i])
		}
	}
	select {
	case <-any:
	case <-time.After(30 * time.Second):
		t.Fatal("the wildcard subscriber was not woken")
	}
	require.Less(t, len(strings.Join(ids, ",")), 8000*5)
}

// A nil notifier is a valid no-op: components without one fall back to polling.
func TestNilNotifier(t *testing.T) {
	t.Parallel()
	var n *notify.Notifier
	n.Notify(notify.ChannelIntents, "")
}

// A watcher is told every value of every notification on its channel, one
// call each, and that the listener connected (again) when it did: after the
// listening session is ended, it reconnects and says so.
func TestWatchSeesValuesAndReconnects(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := notify.NewListener(pool.Config().ConnConfig.Copy(), zerolog.Nop(), notify.ChannelFinal)
	type call struct {
		payload     string
		reconnected bool
	}
	calls := make(chan call, 100)
	stop := l.Watch(notify.ChannelFinal, func(p string, r bool) { calls <- call{p, r} })
	defer stop()
	go l.Run(ctx)
	next := func() call {
		select {
		case c := <-calls:
			return c
		case <-time.After(time.Minute):
			t.Fatal("the watcher was not called")
			return call{}
		}
	}
	require.Equal(t, call{"", true}, next(), "connected")

	_, err := pool.Exec(ctx, `SELECT pg_notify($1, 'lr_a,lr_b')`, notify.ChannelFinal)
	require.NoError(t, err)
	got := []call{next(), next()}
	require.ElementsMatch(t, []call{{"lr_a", false}, {"lr_b", false}}, got)

	var ended int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&ended))
	require.Equal(t, 1, ended)
	require.Equal(t, call{"", true}, next(), "connected again")
}

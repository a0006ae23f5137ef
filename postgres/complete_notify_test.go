package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/postgres"
)

// The completion's own transaction notifies the request ids it made final,
// and wakes the relay of webhook events only when it wrote an event: a
// completion for a caller without an endpoint sends nothing on that channel
// (a sentinel notified after it arrives first there).
func TestCompleteNotifies(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	for _, c := range []string{notify.ChannelFinal, notify.ChannelWebhookEvents} {
		_, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{c}.Sanitize())
		require.NoError(t, err)
	}
	complete := func(orders ...int64) []string {
		var cs []postgres.Completion
		var ids []string
		for _, o := range orders {
			in, tok := accepted(t, pool, o), uuid.New()
			outs, err := postgres.TakeLeases(ctx, pool, []postgres.LeaseRow{{RequestID: in.RequestID, Token: tok}}, time.Minute)
			require.NoError(t, err)
			require.Equal(t, postgres.Leased, outs[0].Result)
			cs, ids = append(cs, completion(in, tok, int(o), nil)), append(ids, in.RequestID)
		}
		saved, err := postgres.Complete(ctx, pool, cs, time.Hour)
		require.NoError(t, err)
		for _, r := range saved {
			require.Equal(t, postgres.Completed, r)
		}
		return ids
	}
	// next returns the next notification's channel and payload.
	next := func() (string, string) {
		n, err := conn.WaitForNotification(ctx)
		require.NoError(t, err)
		return n.Channel, n.Payload
	}

	// Without an endpoint: the ids, and nothing for the relay of events.
	ids := complete(1)
	channel, payload := next()
	require.Equal(t, notify.ChannelFinal, channel)
	require.Equal(t, ids[0], payload)
	_, err = pool.Exec(ctx, `SELECT pg_notify($1, 'sentinel')`, notify.ChannelWebhookEvents)
	require.NoError(t, err)
	channel, payload = next()
	require.Equal(t, notify.ChannelWebhookEvents+" sentinel", channel+" "+payload, "a completion that wrote no event woke the relay of events")

	// With an endpoint: the ids of the statement in one payload, and the
	// relay of events woken once.
	_, err = pool.Exec(ctx, `INSERT INTO webhook_endpoints (caller_id, url) VALUES ('c1', 'https://hooks.example/c1')`)
	require.NoError(t, err)
	ids = complete(2, 3)
	got := map[string]string{}
	for range 2 {
		channel, payload := next()
		got[channel] = payload
	}
	require.ElementsMatch(t, ids, strings.Split(got[notify.ChannelFinal], ","))
	require.Contains(t, got, notify.ChannelWebhookEvents)
}

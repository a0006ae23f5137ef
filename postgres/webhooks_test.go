package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/postgres"
)

// leased accepts order under caller and leases it.
func leased(t testing.TB, pool *pgxpool.Pool, caller string, order int64) (*postgres.Intent, uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	row := fixture.Accept(caller, fmt.Sprintf("label:%d:1:v1", order), fmt.Sprintf("lr_%s_%d", caller, order), order)
	outs, err := postgres.Accept(ctx, pool, []postgres.AcceptRow{row}, postgres.AcceptOpts{})
	require.NoError(t, err)
	require.Equal(t, postgres.AcceptStored, outs[0].Result)
	tok := uuid.New()
	leases, err := postgres.TakeLeases(ctx, pool, []postgres.LeaseRow{{RequestID: row.Intent.RequestID, Token: tok}}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, postgres.Leased, leases[0].Result)
	return row.Intent, tok
}

// The shared completion writes one webhook event per row it completes whose
// caller has an endpoint (disabled endpoints too: the delivery drops it), of
// the outcome's type, in its own statement; a fenced row writes none, and a
// second completion of the same intent writes no second one.
func TestCompleteWritesWebhookEvents(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "hooked", "plain")
	ctx := context.Background()
	_, err := postgres.SetWebhook(ctx, pool, "hooked", "https://hooks.example.com/x", postgres.Secret{Value: make([]byte, 32)})
	require.NoError(t, err)

	var cs []postgres.Completion
	var ids []string
	for i, caller := range []string{"hooked", "hooked", "hooked", "plain"} {
		in, tok := leased(t, pool, caller, int64(100+i))
		var problem *labels.Problem
		if i == 1 {
			problem = labels.NewProblem(labels.CodeCarrierRejected, "rejected")
		}
		if i == 2 {
			tok = uuid.New() // lost its lease: fenced
		}
		cs = append(cs, completion(in, tok, i+1, problem))
		ids = append(ids, in.RequestID)
	}
	outs, err := postgres.Complete(ctx, pool, cs, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []postgres.CompleteResult{postgres.Completed, postgres.Completed, postgres.CompleteFenced, postgres.Completed}, outs)

	rows, err := pool.Query(ctx, `SELECT request_id, event_id, type, state FROM webhook_events ORDER BY request_id`)
	require.NoError(t, err)
	type ev struct{ requestID, eventID, typ, state string }
	var got []ev
	for rows.Next() {
		var e ev
		require.NoError(t, rows.Scan(&e.requestID, &e.eventID, &e.typ, &e.state))
		got = append(got, e)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []ev{
		{ids[0], "msg_" + ids[0], "label_request.succeeded", "pending"},
		{ids[1], "msg_" + ids[1], "label_request.failed", "pending"},
	}, got)
	// The event's time is the completion's.
	require.True(t, dbtest.Scalar[bool](t, pool, `SELECT e.created_at = i.completed_at FROM webhook_events e JOIN label_intents i USING (request_id) WHERE request_id = $1`, ids[0]))

	// The gauges: the oldest pending event, the disabled endpoints.
	_, err = pool.Exec(ctx, `UPDATE webhook_events SET created_at = now() - interval '90 seconds' WHERE request_id = $1`, ids[1])
	require.NoError(t, err)
	st, err := postgres.GetWebhookStats(ctx, pool)
	require.NoError(t, err)
	require.InDelta(t, 90, st.OldestUndelivered.Seconds(), 30)
	require.Zero(t, st.Disabled)

	// The same completions again: fenced, nothing new.
	outs, err = postgres.Complete(ctx, pool, cs[:2], time.Hour)
	require.NoError(t, err)
	require.Equal(t, []postgres.CompleteResult{postgres.CompleteFenced, postgres.CompleteFenced}, outs)
	require.Equal(t, 2, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM webhook_events`))
}

// BenchmarkComplete times the shared completion of 64 rows, for callers
// without and with a webhook endpoint (the second writes 64 events besides).
//
//	go test -run '^$' -bench BenchmarkComplete -benchtime 200x ./postgres/
func BenchmarkComplete(b *testing.B) {
	for _, hooked := range []bool{false, true} {
		b.Run(fmt.Sprintf("endpoint=%v", hooked), func(b *testing.B) {
			pool, _ := dbtest.New(b)
			ctx := context.Background()
			fixture.Caller(b, pool, "c")
			if hooked {
				_, err := postgres.SetWebhook(ctx, pool, "c", "https://hooks.example.com/x", postgres.Secret{Value: make([]byte, 32)})
				require.NoError(b, err)
			}
			order := int64(0)
			for b.Loop() {
				b.StopTimer()
				rows := make([]postgres.AcceptRow, 64)
				leases := make([]postgres.LeaseRow, 64)
				for i := range rows {
					order++
					rows[i] = fixture.Accept("c", fmt.Sprintf("label:%d:1:v1", order), fmt.Sprintf("lr_c_%d", order), order)
					leases[i] = postgres.LeaseRow{RequestID: rows[i].Intent.RequestID, Token: uuid.New()}
				}
				_, err := postgres.Accept(ctx, pool, rows, postgres.AcceptOpts{})
				require.NoError(b, err)
				_, err = postgres.TakeLeases(ctx, pool, leases, time.Minute)
				require.NoError(b, err)
				cs := make([]postgres.Completion, 64)
				for i := range cs {
					cs[i] = completion(rows[i].Intent, leases[i].Token, i, nil)
				}
				b.StartTimer()
				outs, err := postgres.Complete(ctx, pool, cs, time.Hour)
				require.NoError(b, err)
				require.Equal(b, postgres.Completed, outs[63])
			}
		})
	}
}

// Delivered and dropped events are purged once finished before the bound;
// pending ones never.
func TestPurgeWebhookEvents(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO webhook_events (request_id, caller_id, type, created_at, state, finished_at) VALUES
		('lr_old_delivered', 'c', 'label_request.succeeded', now() - interval '40 days', 'delivered', now() - interval '40 days'),
		('lr_old_dropped', 'c', 'label_request.failed', now() - interval '40 days', 'dropped', now() - interval '31 days'),
		('lr_new_delivered', 'c', 'label_request.succeeded', now() - interval '1 day', 'delivered', now() - interval '1 day'),
		('lr_old_pending', 'c', 'label_request.succeeded', now() - interval '40 days', 'pending', NULL)`)
	require.NoError(t, err)
	n, err := postgres.PurgeWebhookEvents(ctx, pool, 30*24*time.Hour, 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "one batch")
	n, err = postgres.PurgeWebhookEvents(ctx, pool, 30*24*time.Hour, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, "lr_new_delivered,lr_old_pending", dbtest.Scalar[string](t, pool, `SELECT string_agg(request_id, ',' ORDER BY request_id) FROM webhook_events`))
}

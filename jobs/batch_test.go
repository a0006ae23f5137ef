package jobs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/internal/dbtest"
	"github.com/labelkit/labels/internal/fixture"
	"github.com/labelkit/labels/outbox"
)

// accepted writes what the accept writes for one parcel: a started key and a
// pending intent. It returns the intent.
func accepted(t *testing.T, pool *pgxpool.Pool, order int64) *outbox.Intent {
	t.Helper()
	ctx := context.Background()
	rec, in := fixture.Accept("c1", fmt.Sprintf("label:%d:1:v1", order), fmt.Sprintf("lr_batch_%d", order), order)
	var kr idempotency.InsertResult
	var ok bool
	b := &pgx.Batch{}
	idempotency.QueueInsert(b, rec, &kr)
	require.NoError(t, outbox.QueueInsert(b, in, &ok))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() }))
	require.True(t, kr.Inserted && ok)
	return in
}

func row[T any](t *testing.T, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&v))
	return v
}

// The shared lease statement leases exactly what the one-job lease would, and
// leaves everything else to it: a live lease, a completed key, a duplicate.
func TestLeaseMany(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	fixture.Caller(t, pool, "c1")
	var ins []*outbox.Intent
	for o := int64(1); o <= 4; o++ {
		ins = append(ins, accepted(t, pool, o))
	}
	// 2 is held by a live lease; 3 is completed (its intent failed).
	_, err := pool.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() + interval '1 minute', lease_token = gen_random_uuid() WHERE request_id = $1`, ins[1].RequestID)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE idempotency_keys SET state = 'completed', response_status = 502, response_body = '{}' WHERE request_id = $1`, ins[2].RequestID)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE label_intents SET status = 'failed', error = '{}', completed_at = now() WHERE request_id = $1`, ins[2].RequestID)
	require.NoError(t, err)

	lease := leaseMany(pool, time.Minute)
	toks := []uuid.UUID{uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()}
	req := []leaseIn{
		{ins[0].RequestID, toks[0]}, {ins[1].RequestID, toks[1]},
		{ins[2].RequestID, toks[2]}, {ins[3].RequestID, toks[3]},
		{ins[0].RequestID, toks[4]}, // the same job twice
		{"lr_missing", uuid.New()},
	}
	outs, err := lease(ctx, req)
	require.NoError(t, err)
	require.Len(t, outs, len(req))
	for i, want := range []bool{true, false, false, true, false, false} {
		require.Equal(t, want, outs[i].intent != nil, "job %d", i)
	}
	require.Equal(t, ins[0].Parcel, outs[0].intent.Parcel)
	require.Equal(t, ins[0].CarrierKey, outs[0].intent.CarrierKey)
	require.Equal(t, 1, outs[0].attempt)
	require.False(t, outs[0].takeover)
	require.Equal(t, toks[0], row[uuid.UUID](t, pool, `SELECT lease_token FROM idempotency_keys WHERE request_id = $1`, ins[0].RequestID))
	require.Equal(t, 1, row[int](t, pool, `SELECT attempts FROM idempotency_keys WHERE request_id = $1`, ins[0].RequestID))
	require.True(t, row[bool](t, pool, `SELECT attempts IS NULL FROM idempotency_keys WHERE request_id = $1`, ins[1].RequestID), "no attempt counted without the lease")
	require.True(t, row[bool](t, pool, `SELECT attempts IS NULL FROM idempotency_keys WHERE request_id = $1`, ins[2].RequestID))

	// An expired lease is taken over, and the attempt counted again.
	_, err = pool.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() - interval '1 ms' WHERE request_id = $1`, ins[3].RequestID)
	require.NoError(t, err)
	tok := uuid.New()
	outs, err = lease(ctx, []leaseIn{{ins[3].RequestID, tok}})
	require.NoError(t, err)
	require.NotNil(t, outs[0].intent)
	require.True(t, outs[0].takeover)
	require.Equal(t, 2, outs[0].attempt)
	require.Equal(t, tok, row[uuid.UUID](t, pool, `SELECT lease_token FROM idempotency_keys WHERE request_id = $1`, ins[3].RequestID))
}

// The shared completion saves each job whose lease still holds, exactly as
// the one-job completion does, and writes nothing at all for a job whose
// lease was lost or whose label would be a second one for its parcel; the
// others of the batch are saved all the same.
func TestCompleteMany(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	fixture.Caller(t, pool, "c1")
	var ins []*outbox.Intent
	var toks []uuid.UUID
	for o := int64(1); o <= 4; o++ {
		in := accepted(t, pool, o)
		ins = append(ins, in)
		outs, err := leaseMany(pool, time.Minute)(ctx, []leaseIn{{in.RequestID, uuid.New()}})
		require.NoError(t, err)
		require.NotNil(t, outs[0].intent)
		toks = append(toks, row[uuid.UUID](t, pool, `SELECT lease_token FROM idempotency_keys WHERE request_id = $1`, in.RequestID))
	}
	// Parcel 4 already has a label (only possible if the natural key of the
	// intents failed): its completion must write nothing.
	_, err := pool.Exec(ctx, `INSERT INTO label_intents (request_id, caller_id, idem_key, request_hash, fingerprint_version,
	        order_id, parcel_no, label_version, payload, carrier_key, status, error, created_at, completed_at)
	     SELECT 'lr_other', caller_id, 'other', request_hash, fingerprint_version, order_id, parcel_no, label_version,
	            payload, 'ck-other', 'failed', '{}', created_at, now() FROM label_intents WHERE request_id = $1`, ins[3].RequestID)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO labels (label_id, caller_id, request_id, order_id, parcel_no, label_version, service,
	        tracking_no, carrier_label_id, carrier_key, cost_cents, currency, created_by_key, created_at)
	     VALUES ('lbl_other', 'c1', 'lr_other', 4, 1, 1, 'standard', 'T-other', 'CL-other', 'ck-other', 100, 'EUR', 'other', now())`)
	require.NoError(t, err)

	bought := func(n int) outcome {
		return outcome{bought: &carrier.Label{TrackingNo: fmt.Sprintf("T-%d", n), CarrierLabelID: fmt.Sprintf("CL-%d", n), CostCents: 495, Currency: "EUR"}}
	}
	cs := make([]completion, 4)
	for i, in := range ins {
		out := bought(i + 1)
		if i == 2 {
			out = outcome{problem: labels.NewProblem(422, labels.CodeCarrierRejected, "rejected")}
		} else {
			out.label = newLabel(in, out.bought)
		}
		tok := toks[i]
		if i == 1 {
			tok = uuid.New() // a stale attempt: its lease was taken over
		}
		cs[i] = completionOf(in, tok, out)
	}
	saved, err := completeMany(pool, time.Hour)(ctx, cs)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true, false}, saved)

	state := func(in *outbox.Intent) string {
		return row[string](t, pool, `SELECT k.state::text || ' ' || coalesce(k.response_status::text, '-') || ' ' || i.status || ' ' ||
		        (SELECT count(*) FROM labels l WHERE l.request_id = i.request_id)
		   FROM idempotency_keys k JOIN label_intents i ON i.request_id = k.request_id WHERE k.request_id = $1`, in.RequestID)
	}
	require.Equal(t, "completed 201 succeeded 1", state(ins[0]))
	require.Equal(t, "started - pending 0", state(ins[1]), "a lost lease writes nothing")
	require.Equal(t, "completed 422 failed 0", state(ins[2]))
	require.Equal(t, "started - pending 0", state(ins[3]), "a second label for the parcel writes nothing")

	// What was saved is what the one-job completion saves.
	require.JSONEq(t, string(cs[0].body), row[string](t, pool, `SELECT response_body::text FROM idempotency_keys WHERE request_id = $1`, ins[0].RequestID))
	require.Equal(t, cs[0].label.LabelID, row[string](t, pool, `SELECT label_id FROM label_intents WHERE request_id = $1`, ins[0].RequestID))
	require.JSONEq(t, string(cs[2].body), row[string](t, pool, `SELECT error::text FROM label_intents WHERE request_id = $1`, ins[2].RequestID))
	require.True(t, row[bool](t, pool, `SELECT expires_at > now() + interval '59 minutes' AND lease_token IS NULL AND locked_until IS NULL
	   FROM idempotency_keys WHERE request_id = $1`, ins[0].RequestID))
	require.Equal(t, "T-1 CL-1 495 EUR label:1:1:v1", row[string](t, pool,
		`SELECT tracking_no || ' ' || carrier_label_id || ' ' || cost_cents || ' ' || currency || ' ' || created_by_key FROM labels WHERE request_id = $1`, ins[0].RequestID))

	// Saved once: the same completion again saves nothing.
	saved, err = completeMany(pool, time.Hour)(ctx, cs[:1])
	require.NoError(t, err)
	require.Equal(t, []bool{false}, saved)
}

// The shared statements' generic plans, made on empty tables that keep the
// statistics of a full store (almost every key completed, every intent
// final), probe the tables through their indexes from the batch's rows. So
// it is in every end-to-end run of tools/bench (its phases truncate the
// tables, and ANALYZE has seen them full), and after any emptying of the
// tables: a plain join made the lease's plan walk the whole keys table for
// every statement, for as long as the connection lived.
func TestSharedPlansProbeOnEmptyTables(t *testing.T) {
	pool, _ := dbtest.New(t)
	conn := fixture.EmptiedFullStore(t, pool)
	uid := "'{00000000-0000-0000-0000-000000000000}'"
	t.Run("lease", func(t *testing.T) {
		dbtest.RequireProbes(t, conn, sqlPlanSettings, nil, sqlLeaseMany,
			[]string{"text[]", "uuid[]", "float8"}, []string{"'{lr_1}'", uid, "30"},
			"idempotency_keys", "label_intents")
	})
	t.Run("completion", func(t *testing.T) {
		text, num, ts := "'{a}'", "'{1}'", "'{2026-12-02T00:00:00Z}'"
		dbtest.RequireProbes(t, conn, sqlPlanSettings, nil, sqlCompleteMany,
			[]string{"text[]", "text[]", "text[]", "uuid[]", "int[]", "text[]", "text[]", "text[]", "text[]", "text[]", "text[]", "text[]",
				"bigint[]", "bigint[]", "int[]", "int[]", "timestamptz[]", "timestamptz[]", "float8"},
			[]string{text, text, text, uid, num, `'{"{}"}'`, text, text, text, text, text, text, num, num, num, num, ts, ts, "86400"},
			"idempotency_keys", "label_intents")
	})
}

package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/postgres"
)

// completion is what the buy-label worker saves for in: a label, or problem
// when it is not nil.
func completion(in *postgres.Intent, tok uuid.UUID, n int, problem *labels.Problem) postgres.Completion {
	c := postgres.Completion{RequestID: in.RequestID, CallerID: in.CallerID, Key: in.Key, Token: tok}
	if problem != nil {
		c.Status, c.Body = problem.Status, problem.Body()
		return c
	}
	c.Label = &postgres.Label{Label: labels.Label{LabelID: "lbl_" + ulid.Make().String(), OrderID: in.Parcel.OrderID,
		ParcelNo: in.Parcel.ParcelNo, LabelVersion: in.Parcel.LabelVersion, Service: in.Parcel.Service,
		TrackingNo: fmt.Sprintf("T-%d", n), CarrierLabelID: fmt.Sprintf("CL-%d", n), CostCents: 495, Currency: "EUR"},
		CallerID: in.CallerID, RequestID: in.RequestID, CarrierKey: in.CarrierKey, CreatedByKey: in.Key}
	c.Status = 201 // Complete renders the label, with the database's time
	return c
}

// The completion saves each row whose lease still holds, and writes nothing
// at all for a row whose lease was lost or whose label would be a second one
// for its parcel, saying which; the others of the statement are saved all the
// same.
func TestComplete(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	var ins []*postgres.Intent
	var toks []uuid.UUID
	for o := int64(1); o <= 4; o++ {
		in := accepted(t, pool, o)
		ins = append(ins, in)
		tok := uuid.New()
		outs, err := postgres.TakeLeases(ctx, pool, []postgres.LeaseRow{{RequestID: in.RequestID, Token: tok}}, time.Minute)
		require.NoError(t, err)
		require.Equal(t, postgres.Leased, outs[0].Result)
		toks = append(toks, tok)
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

	cs := make([]postgres.Completion, 4)
	for i, in := range ins {
		var problem *labels.Problem
		if i == 2 {
			problem = labels.NewProblem(labels.CodeCarrierRejected, "rejected")
		}
		tok := toks[i]
		if i == 1 {
			tok = uuid.New() // a stale attempt: its lease was taken over
		}
		cs[i] = completion(in, tok, i+1, problem)
	}
	saved, err := postgres.Complete(ctx, pool, cs, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []postgres.CompleteResult{postgres.Completed, postgres.CompleteFenced, postgres.Completed, postgres.CompleteParcelLabelled}, saved)

	state := func(in *postgres.Intent) string {
		return dbtest.Scalar[string](t, pool, `SELECT k.state::text || ' ' || coalesce(k.response_status::text, '-') || ' ' || i.status || ' ' ||
		        (SELECT count(*) FROM labels l WHERE l.request_id = i.request_id)
		   FROM idempotency_keys k JOIN label_intents i ON i.request_id = k.request_id WHERE k.request_id = $1`, in.RequestID)
	}
	require.Equal(t, "completed 201 succeeded 1", state(ins[0]))
	require.Equal(t, "started - pending 0", state(ins[1]), "a lost lease writes nothing")
	require.Equal(t, "completed 422 failed 0", state(ins[2]))
	require.Equal(t, "started - pending 0", state(ins[3]), "a second label for the parcel writes nothing")

	// The saved body is the label as rendered from its row, byte for byte,
	// created_at the completion's now().
	row, err := postgres.GetLabel(ctx, pool, "c1", cs[0].Label.LabelID)
	require.NoError(t, err)
	require.Equal(t, string(row.Label.Body()), dbtest.Scalar[string](t, pool, `SELECT response_body::text FROM idempotency_keys WHERE request_id = $1`, ins[0].RequestID),
		"saved byte for byte")
	require.True(t, dbtest.Scalar[bool](t, pool, `SELECT l.created_at = i.completed_at FROM labels l JOIN label_intents i USING (request_id) WHERE request_id = $1`, ins[0].RequestID))
	require.Equal(t, cs[0].Label.LabelID, dbtest.Scalar[string](t, pool, `SELECT label_id FROM label_intents WHERE request_id = $1`, ins[0].RequestID))
	require.JSONEq(t, string(cs[2].Body), dbtest.Scalar[string](t, pool, `SELECT error::text FROM label_intents WHERE request_id = $1`, ins[2].RequestID))
	require.True(t, dbtest.Scalar[bool](t, pool, `SELECT expires_at > now() + interval '59 minutes' AND lease_token IS NULL AND locked_until IS NULL
	   FROM idempotency_keys WHERE request_id = $1`, ins[0].RequestID))
	require.Equal(t, "T-1 CL-1 495 EUR label:1:1:v1", dbtest.Scalar[string](t, pool,
		`SELECT tracking_no || ' ' || carrier_label_id || ' ' || cost_cents || ' ' || currency || ' ' || created_by_key FROM labels WHERE request_id = $1`, ins[0].RequestID))

	// Saved once: the same completion again is fenced.
	saved, err = postgres.Complete(ctx, pool, cs[:1], time.Hour)
	require.NoError(t, err)
	require.Equal(t, []postgres.CompleteResult{postgres.CompleteFenced}, saved)
}

// A key row another session holds makes its completion busy (tried again
// later) without holding up the other completions of the statement.
func TestCompleteSkipsALockedRow(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	a, b := accepted(t, pool, 1), accepted(t, pool, 2)
	ta, tb := uuid.New(), uuid.New()
	_, err := postgres.TakeLeases(ctx, pool, []postgres.LeaseRow{{RequestID: a.RequestID, Token: ta}, {RequestID: b.RequestID, Token: tb}}, time.Minute)
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `SELECT 1 FROM idempotency_keys WHERE request_id = $1 FOR UPDATE`, a.RequestID)
	require.NoError(t, err)
	saved, err := postgres.Complete(ctx, pool, []postgres.Completion{completion(a, ta, 1, nil), completion(b, tb, 2, nil)}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []postgres.CompleteResult{postgres.CompleteBusy, postgres.Completed}, saved)
	require.NoError(t, tx.Rollback(ctx))
	saved, err = postgres.Complete(ctx, pool, []postgres.Completion{completion(a, ta, 1, nil)}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []postgres.CompleteResult{postgres.Completed}, saved)
}

// The completion writes a label's created_at into its saved body as Go would
// render the time read back from the row (labels.Label.Body): RFC 3339 in
// UTC, the fraction without trailing zeros, whatever the session's time zone.
func TestCompletionRendersTheDatabaseTimeAsGo(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	require.Equal(t, 1, strings.Count(string(labels.Label{}.Body()), postgres.LabelCreatedAtZero))
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET TimeZone = 'Asia/Kathmandu'`)
	require.NoError(t, err)
	render := strings.ReplaceAll(postgres.SQLNowRFC3339, "now()", "$1::timestamptz")
	for _, at := range []string{
		"2026-12-06T03:29:31Z", "2026-12-06T03:29:31.1Z", "2026-12-06T03:29:31.123456Z", "2026-12-06T03:29:31.000001Z",
		"2026-12-06T03:29:31.01Z", "2026-12-31T23:59:59.99999+05:45", "1999-01-02T00:00:00.5-08:00",
	} {
		tm, err := time.Parse(time.RFC3339Nano, at)
		require.NoError(t, err)
		var got string
		require.NoError(t, conn.QueryRow(ctx, `SELECT `+render, tm).Scan(&got))
		want, err := json.Marshal(tm.UTC())
		require.NoError(t, err)
		require.Equal(t, string(want), `"`+got+`"`, at)
	}
}

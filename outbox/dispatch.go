package outbox

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/labelkit/labels/internal/tracing"
	"github.com/labelkit/labels/jobs"
)

// insertFunc inserts one River job per request id inside tx, the relay's
// transaction; metadata, when not nil, holds each job's metadata (nil:
// none), in the order of the ids.
type insertFunc func(ctx context.Context, tx pgx.Tx, requestIDs []string, metadata [][]byte) error

// insertBuyLabels returns the intent relay's insert: one buy_label job
// ([jobs.BuyLabelArgs], unique by request id) per intent.
func insertBuyLabels(client *river.Client[pgx.Tx]) insertFunc {
	return jobs.InsertByID(client, func(id string) river.JobArgs { return jobs.BuyLabelArgs{RequestID: id} })
}

// insertWebhooks returns the event relay's insert: one deliver_webhook job
// ([jobs.DeliverWebhookArgs], unique by request id) per event.
func insertWebhooks(client *river.Client[pgx.Tx]) insertFunc {
	return jobs.InsertByID(client, func(id string) river.JobArgs { return jobs.DeliverWebhookArgs{RequestID: id} })
}

// sqlDispatch takes the next intents off the relay's queue, the callers in
// turns, deletes them and returns their request ids in the order they are to
// run; rows another relay holds are skipped. Its parameters: $1 the batch,
// $2 the bound on River's backlog (jobs waiting to run; 0 or less: none), $3
// River's queue, $4 the caller served last.
//
//   - room: how many it may take: the batch, but no more than brings the jobs
//     of River's queue that are available and not yet running up to the
//     bound (counted only up to the bound).
//   - callers: the distinct callers with queued intents, by a skip scan of
//     the caller index (one probe per caller, whatever the queue's size).
//   - turns: each caller's oldest intents, numbered: its first, second, ...
//     turn. A caller gets at most its share of the room (the quota,
//     room / callers rounded up); one more is read to tell whether it has
//     more queued.
//   - taken: the rows of the first turns, every caller's first before any
//     second, and within a turn the callers in id order from the one after
//     the caller served last (round robin: with room for one at a time, the
//     callers still alternate), up to the room, locked (SKIP
//     LOCKED: a row another relay holds is left to it) and deleted, each
//     found by its ctid (a TID scan, whatever the queue's size).
//
// It returns the room, how many turns it read, the request ids taken in
// turn order, the caller of the last one (the one served last), and the
// traceparents the accepts stored with the ids taken (NULL: tracing off). It runs
// as a one-off statement, always planned with the table's current size:
// planning and running it take a few hundred microseconds with thousands
// queued, and the relay runs it once per notification, poll or refill (a
// quarter of the backlog started), not per intent.
const sqlDispatch = `
WITH RECURSIVE
waiting AS (
       SELECT count(*)::int AS n
         FROM (SELECT 1 FROM river_job
                WHERE state = 'available' AND queue = $3::text
                LIMIT greatest($2::int, 0)) j),
room AS (
       SELECT CASE WHEN $2::int <= 0 THEN $1::int ELSE least($1::int, greatest($2::int - n, 0)) END AS n
         FROM waiting),
callers AS (
       (SELECT caller_id FROM label_intent_outbox ORDER BY caller_id LIMIT 1)
       UNION ALL
       SELECT (SELECT o.caller_id FROM label_intent_outbox o
                WHERE o.caller_id > c.caller_id ORDER BY o.caller_id LIMIT 1)
         FROM callers c
        WHERE c.caller_id IS NOT NULL),
quota AS (
       SELECT (room.n + k.n - 1) / k.n AS q
         FROM room, (SELECT greatest(count(caller_id), 1)::int AS n FROM callers) k),
turns AS (
       SELECT o.tid, c.caller_id, o.request_id, o.turn
         FROM callers c, quota,
              LATERAL (SELECT ctid AS tid, created_at, request_id,
                              row_number() OVER (ORDER BY created_at, request_id) AS turn
                         FROM label_intent_outbox o
                        WHERE o.caller_id = c.caller_id
                        ORDER BY created_at, request_id
                        LIMIT quota.q + 1) o
        WHERE c.caller_id IS NOT NULL),
taken AS (
       DELETE FROM label_intent_outbox
        WHERE ctid = ANY (ARRAY (
              SELECT ctid FROM label_intent_outbox
               WHERE ctid = ANY (ARRAY (SELECT tid FROM turns
                                         WHERE turn <= (SELECT q FROM quota)
                                         ORDER BY turn, caller_id <= $4::text, caller_id
                                         LIMIT (SELECT n FROM room)))
                 FOR UPDATE SKIP LOCKED))
       RETURNING request_id, traceparent)
SELECT (SELECT n FROM room), (SELECT count(*) FROM turns)::int, coalesce(array_agg(t.request_id ORDER BY t.o), '{}'),
       coalesce((array_agg(t.caller_id ORDER BY t.o DESC))[1], $4::text),
       coalesce(array_agg(t.traceparent ORDER BY t.o), '{}')
  FROM (SELECT t.request_id, t.caller_id, taken.traceparent,
               row_number() OVER (ORDER BY t.turn, t.caller_id <= $4::text, t.caller_id) AS o
          FROM taken JOIN turns t USING (request_id)) t`

// dispatchOpts bounds what one [dispatchIntents] takes.
type dispatchOpts struct {
	// Batch is the most intents one call takes.
	Batch int
	// Backlog bounds River's backlog: a call takes no more intents than
	// bring the jobs of Queue that are available and not yet running up to
	// Backlog; 0 or less: no bound.
	Backlog int
	// Queue is River's queue the jobs go to.
	Queue string
	// After is the caller served last ([dispatched].Last of the previous
	// call): within each turn the callers go in id order from the one after
	// it, so the callers alternate even when a call takes one intent.
	After string
}

// dispatched is what one [dispatchIntents] did.
type dispatched struct {
	// Taken is how many intents it inserted jobs for.
	Taken int
	// Room is how many it could take: the batch, or less when River's
	// backlog was near its bound.
	Room int
	// Left says the queue held intents it did not take: beyond a caller's
	// share, beyond the room, or held by another relay.
	Left bool
	// Last is the caller of the last intent taken (After when none was).
	Last string
}

// dispatchIntents takes the next intents off the relay's queue
// (label_intent_outbox) and inserts their jobs, in one transaction: the jobs
// and the queue's deletes commit together, and several relays at once never
// dispatch an intent twice. The callers take turns (every caller's oldest
// queued intent before any caller's second, round robin within a turn from
// the caller after opts.After, and a caller at most its share of the batch),
// and it takes no more than bring River's backlog up to opts.Backlog, so
// that one caller's burst waits here, behind the next intent of every other
// caller, rather than in River's queue, which runs in order.
func dispatchIntents(ctx context.Context, pool *pgxpool.Pool, opts dispatchOpts, insert insertFunc) (dispatched, error) {
	var d dispatched
	var spans relaySpans
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var read int
		var ids []string
		var traceparents []*string
		err := tx.QueryRow(ctx, sqlDispatch, pgx.QueryExecModeExec, opts.Batch, opts.Backlog, opts.Queue, opts.After).
			Scan(&d.Room, &read, &ids, &d.Last, &traceparents)
		if err != nil {
			return err
		}
		d.Left = read > len(ids)
		if len(ids) == 0 {
			return nil
		}
		spans = startRelaySpans(ctx, ids, traceparents)
		if err := insert(ctx, tx, ids, spans.metadata); err != nil {
			return err
		}
		d.Taken = len(ids)
		return nil
	})
	spans.end(err)
	if err != nil {
		return dispatched{}, err
	}
	return d, nil
}

// relaySpans are the relay's spans of one batch: one per intent whose
// accept stored a traceparent, in the intent's trace.
type relaySpans struct {
	spans    []trace.Span
	metadata [][]byte // each job's: the traceparent of its relay span; nil: none has one
}

// startRelaySpans starts the relay's span of each intent with a traceparent,
// a child of its accept's span, and names it in its job's metadata: the job
// continues the trace from there (tracing.RiverMiddleware). Nothing while
// tracing is off.
func startRelaySpans(ctx context.Context, ids []string, traceparents []*string) relaySpans {
	var r relaySpans
	if !tracing.On() {
		return r
	}
	for i, tp := range traceparents {
		if tp == nil {
			continue
		}
		sctx, span := tracing.Tracer().Start(tracing.WithParent(ctx, *tp), "outbox.relay",
			trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attribute.String("labels.request_id", ids[i])))
		if r.metadata == nil {
			r.metadata = make([][]byte, len(ids))
		}
		r.spans, r.metadata[i] = append(r.spans, span), tracing.JobMetadata(tracing.Traceparent(sctx))
	}
	return r
}

// end ends the spans once the batch's transaction is over (err: it failed).
func (r relaySpans) end(err error) {
	for _, s := range r.spans {
		tracing.Fail(s, err)
		s.End()
	}
}

// sqlDispatchEvents marks up to $1 of the oldest undispatched events
// dispatched, skipping those another relay holds, and returns their request
// ids: the event relay's take, sqlDispatch's for webhook events.
const sqlDispatchEvents = `
UPDATE webhook_events SET dispatched_at = now()
 WHERE request_id IN (SELECT request_id FROM webhook_events
                       WHERE dispatched_at IS NULL
                       ORDER BY created_at
                       LIMIT $1
                         FOR UPDATE SKIP LOCKED)
RETURNING request_id`

// dispatchEvents is [dispatchIntents] for webhook events: it marks up to
// batch undispatched events dispatched (sqlDispatchEvents) and inserts their
// jobs, in one transaction, and returns how many it took.
func dispatchEvents(ctx context.Context, pool *pgxpool.Pool, batch int, insert insertFunc) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlDispatchEvents, pgx.QueryExecModeExec, batch)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		if err := insert(ctx, tx, ids, nil); err != nil {
			return err
		}
		n = len(ids)
		return nil
	})
	return n, err
}

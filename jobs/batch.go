package jobs

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labelkit/labels/label"
	"github.com/labelkit/labels/outbox"
)

// The worker's two writes per label, the lease and the completion, are each
// one statement that serves many jobs at once (see internal/group): one round trip and
// one commit per batch instead of four to six round trips and a commit per
// job. Each statement does for a job exactly what the one-job transactions in
// buylabel.go do, or nothing at all: a job the statement did not serve (a key
// already completed, a lease held by someone else, a lost lease, a parcel
// that already has a label, any error) goes through those transactions, which
// then say why. So the batched path adds no outcome of its own, and every
// guarantee (the lease committed before the carrier call, the fenced
// completion) is the statement's: a single statement commits all or nothing.

// batchMax bounds the jobs of one statement; batchFlushers is how many
// statements of a kind may run at once.
const (
	batchMax      = 64
	batchFlushers = 1
)

type leaseIn struct {
	requestID string
	token     uuid.UUID
}

// leaseOut is a leased job's intent (nil when the statement did not lease it),
// the carrier attempt it counted, and whether it took over an expired lease.
type leaseOut struct {
	intent   *outbox.Intent
	attempt  int
	takeover bool
}

// sqlLeaseMany leases the keys of pending intents that nobody holds, counts
// the attempt on each key (one update per job: the intent is only read), and
// returns the intents with the attempt counts.
//
// The batch drives the plan: each of its rows probes its intent, then locks
// the intent's key, through their primary keys, in LATERAL subqueries that
// PostgreSQL cannot merge into a join (OFFSET 0, FOR UPDATE), so it cannot
// start from a table instead. Written as a plain join, the generic plan that
// a connection made on emptied tables whose statistics still said "every key
// completed" (every end-to-end run of tools/bench; a store emptied or
// restored) walked the whole keys table for every statement, for as long as
// the connection lived (docs/bench.md, "The night"). The intent is read
// without a lock: its status only ever changes together with its key's
// state, in a transaction that holds the key (the completion), and the
// key's lock rechecks that state. Only keys are locked, in the batch's order,
// which leaseMany sorts by request id: the order in which sqlCompleteMany
// locks each job's key and then its intent, so two batches never wait for
// each other in a cycle.
const sqlLeaseMany = `
WITH inp AS (
       SELECT * FROM unnest($1::text[], $2::uuid[]) AS t(request_id, token)),
     cand AS MATERIALIZED (
       SELECT i.request_id, k.caller_id, k.idem_key, inp.token, k.lease_token AS prev
         FROM inp
        CROSS JOIN LATERAL (
              SELECT request_id, caller_id, idem_key FROM label_intents
               WHERE request_id = inp.request_id
                 AND (status || '') = 'pending' -- keeps the partial index of pending intents out
              OFFSET 0) i
        CROSS JOIN LATERAL (
              SELECT caller_id, idem_key, lease_token FROM idempotency_keys
               WHERE caller_id = i.caller_id AND idem_key = i.idem_key
                 AND state = 'started' AND (locked_until IS NULL OR locked_until <= now())
                 FOR UPDATE) k),
     upd AS (
       UPDATE idempotency_keys k
          SET locked_until = now() + make_interval(secs => $3), lease_token = c.token, attempts = coalesce(k.attempts, 0) + 1
         FROM cand c
        WHERE k.caller_id = c.caller_id AND k.idem_key = c.idem_key
       RETURNING c.request_id AS leased, c.prev, k.attempts)
SELECT ` + outbox.Columns + `, upd.prev IS NOT NULL, upd.attempts
  FROM upd JOIN label_intents ON request_id = upd.leased`

// leaseMany runs sqlLeaseMany with leases of d.
func leaseMany(pool *pgxpool.Pool, d time.Duration) func(ctx context.Context, ins []leaseIn) ([]leaseOut, error) {
	return func(ctx context.Context, ins []leaseIn) ([]leaseOut, error) {
		outs := make([]leaseOut, len(ins))
		at := make(map[string]int, len(ins))
		ids := make([]string, 0, len(ins))
		tokens := make([]uuid.UUID, 0, len(ins))
		// The statement locks in the batch's order: by request id (stable,
		// so that of two runs of one job the first queued is the one sent).
		order := make([]int, len(ins))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(ins[a].requestID, ins[b].requestID) })
		for _, i := range order {
			in := ins[i]
			// The same intent twice in a batch (two runs of its job at once):
			// the second goes the one-job way, and finds the lease held.
			if _, dup := at[in.requestID]; dup {
				continue
			}
			at[in.requestID] = i
			ids = append(ids, in.requestID)
			tokens = append(tokens, in.token)
		}
		err := queryGeneric(ctx, pool, sqlLeaseMany, []any{ids, tokens, d.Seconds()}, func(rows pgx.Rows) error {
			for rows.Next() {
				var out leaseOut
				in, err := outbox.ScanIntent(rows, &out.takeover, &out.attempt)
				if err != nil {
					return err
				}
				out.intent = in
				outs[at[in.RequestID]] = out
			}
			return rows.Err()
		})
		if err != nil {
			return nil, err
		}
		return outs, nil
	}
}

// sqlPlanSettings are the shared statements' plan settings (queryGeneric).
const sqlPlanSettings = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
       set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`

// queryGeneric runs one statement in a transaction of its own, sent in one
// round trip, reading its rows with each; the results count only when it
// returns nil (the commit succeeded). The statement keeps its generic plan:
// PostgreSQL would otherwise plan the shared statements anew on every run
// (their arrays make the generic plan look dearer than the custom ones), and
// planning them costs as much as running a small batch. That plan is made
// once per connection, with whatever statistics the tables have then, so
// the planner is told the one shape that is right at any table size: the
// batch's rows probe the tables through their indexes (no sequential scan,
// no hash or merge join against a table), never a plan that reads a table
// whole because it looked empty when the connection first ran the statement.
func queryGeneric(ctx context.Context, pool *pgxpool.Pool, sql string, args []any, each func(pgx.Rows) error) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(sqlPlanSettings)
	b.Queue(sql, args...).Query(each)
	b.Queue("COMMIT")
	// On an error the connection is left in its transaction, and the pool
	// closes a connection released in one.
	return pool.SendBatch(ctx, b).Close()
}

// completion is one job's outcome to save: the key's response, and either the
// label or the problem the intent failed with.
type completion struct {
	requestID string
	callerID  string
	key       string
	token     uuid.UUID
	status    int
	body      []byte        // the saved response: the label, or the problem
	label     *label.Record // nil for a problem
}

// sqlCompleteMany saves the outcomes whose key is still started and leased
// with the job's token and whose intent is still pending (both locked first,
// in key order), and returns the request ids it saved. A label that would
// break a unique constraint is not inserted, and then nothing else of its job
// is written either.
const sqlCompleteMany = `
WITH inp AS (
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::int[], $6::text[],
                            $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[],
                            $13::bigint[], $14::bigint[], $15::int[], $16::int[], $17::timestamptz[], $18::timestamptz[])
         AS t(request_id, caller_id, idem_key, token, status, body,
              label_id, service, tracking_no, carrier_label_id, carrier_key, currency,
              order_id, cost_cents, parcel_no, label_version, purchased_at, created_at)),
     ok AS MATERIALIZED (
       SELECT inp.*
         FROM inp
         JOIN idempotency_keys k ON k.caller_id = inp.caller_id AND k.idem_key = inp.idem_key
         JOIN label_intents i ON i.request_id = inp.request_id
        WHERE k.state = 'started' AND k.lease_token = inp.token
          AND (i.status || '') = 'pending' -- as in sqlLeaseMany
        ORDER BY inp.request_id -- the lease's order
          FOR UPDATE OF k, i),
     lab AS (
       INSERT INTO labels (label_id, caller_id, request_id, order_id, parcel_no, label_version, service,
                           tracking_no, carrier_label_id, carrier_key, cost_cents, currency,
                           created_by_key, purchased_at, created_at)
       SELECT label_id, caller_id, request_id, order_id, parcel_no, label_version, service,
              tracking_no, carrier_label_id, carrier_key, cost_cents, currency,
              idem_key, purchased_at, created_at
         FROM ok WHERE label_id IS NOT NULL
       ON CONFLICT DO NOTHING
       RETURNING request_id),
     good AS MATERIALIZED (
       SELECT * FROM ok WHERE label_id IS NULL OR request_id IN (SELECT request_id FROM lab)),
     keys AS (
       UPDATE idempotency_keys k
          SET state = 'completed', locked_until = NULL, lease_token = NULL, attempts = NULL,
              response_status = g.status, response_body = g.body::json,
              expires_at = now() + make_interval(secs => $19)
         FROM good g
        WHERE k.caller_id = g.caller_id AND k.idem_key = g.idem_key
       RETURNING g.request_id),
     intents AS (
       UPDATE label_intents i
          SET status = CASE WHEN g.label_id IS NULL THEN 'failed' ELSE 'succeeded' END,
              label_id = g.label_id,
              error = CASE WHEN g.label_id IS NULL THEN g.body::json END,
              completed_at = now()
         FROM good g
        WHERE i.request_id = g.request_id
       RETURNING i.request_id)
SELECT request_id FROM keys INTERSECT SELECT request_id FROM intents` // hashed: a join here was a nested loop, quadratic in the batch

// completeMany runs sqlCompleteMany, keys kept for retention, and says, per
// job, whether it was saved.
func completeMany(pool *pgxpool.Pool, retention time.Duration) func(ctx context.Context, cs []completion) ([]bool, error) {
	return func(ctx context.Context, cs []completion) ([]bool, error) {
		n := len(cs)
		var (
			ids, callers, keys, bodies                      = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
			tokens                                          = make([]uuid.UUID, 0, n)
			statuses, parcelNos, versions                   = make([]int, 0, n), make([]*int, 0, n), make([]*int, 0, n)
			labelIDs, services, trackings, cls, ckeys, curs = make([]*string, 0, n), make([]*string, 0, n), make([]*string, 0, n), make([]*string, 0, n), make([]*string, 0, n), make([]*string, 0, n)
			orderIDs, costs                                 = make([]*int64, 0, n), make([]*int64, 0, n)
			purchased, created                              = make([]*time.Time, 0, n), make([]*time.Time, 0, n)
			at                                              = make(map[string]int, n)
		)
		for i, c := range cs {
			if _, dup := at[c.requestID]; dup {
				continue // saved by its first occurrence, or not at all; the one-job way says which
			}
			at[c.requestID] = i
			ids, callers, keys, tokens = append(ids, c.requestID), append(callers, c.callerID), append(keys, c.key), append(tokens, c.token)
			statuses, bodies = append(statuses, c.status), append(bodies, string(c.body))
			if l := c.label; l != nil {
				labelIDs, services, trackings = append(labelIDs, &l.LabelID), append(services, &l.Service), append(trackings, &l.TrackingNo)
				cls, ckeys, curs = append(cls, &l.CarrierLabelID), append(ckeys, &l.CarrierKey), append(curs, &l.Currency)
				orderIDs, costs = append(orderIDs, &l.OrderID), append(costs, &l.CostCents)
				parcelNos, versions = append(parcelNos, &l.ParcelNo), append(versions, &l.LabelVersion)
				purchased, created = append(purchased, l.PurchasedAt), append(created, &l.CreatedAt)
			} else {
				labelIDs, services, trackings = append(labelIDs, nil), append(services, nil), append(trackings, nil)
				cls, ckeys, curs = append(cls, nil), append(ckeys, nil), append(curs, nil)
				orderIDs, costs = append(orderIDs, nil), append(costs, nil)
				parcelNos, versions = append(parcelNos, nil), append(versions, nil)
				purchased, created = append(purchased, nil), append(created, nil)
			}
		}
		saved := make([]bool, n)
		err := queryGeneric(ctx, pool, sqlCompleteMany, []any{ids, callers, keys, tokens, statuses, bodies,
			labelIDs, services, trackings, cls, ckeys, curs, orderIDs, costs, parcelNos, versions,
			purchased, created, retention.Seconds()}, func(rows pgx.Rows) error {
			var id string
			_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
				saved[at[id]] = true
				return nil
			})
			return err
		})
		if err != nil {
			return nil, err
		}
		return saved, nil
	}
}

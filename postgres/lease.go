package postgres

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LeaseRow asks for the lease of one intent's key for one attempt.
type LeaseRow struct {
	RequestID string
	Token     uuid.UUID // the attempt's fresh lease token
}

// pgUUID is a lease token as the statements send it: pgx copies a
// pgtype.UUID as it is, where a google/uuid UUID would go through its
// driver.Valuer, a string parsed again for every element of an array.
func pgUUID(u uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: u, Valid: true} }

// LeaseResult is what [TakeLeases] did with one row.
type LeaseResult int

const (
	// Leased: the key is the attempt's until the lease ends; the carrier may be called.
	Leased LeaseResult = iota + 1
	// LeaseGone: there is no such intent (or no key behind it).
	LeaseGone
	// LeaseFinal: the intent is final already; nothing is left to do.
	LeaseFinal
	// LeaseHeld: another attempt holds a live lease, until HeldUntil.
	LeaseHeld
	// LeaseBusy: another session holds the key's row right now (its own
	// lease or completion in flight, or a session stuck in a transaction);
	// the row was skipped rather than waited for.
	LeaseBusy
)

// LeaseOutcome is the outcome of one row.
type LeaseOutcome struct {
	Result LeaseResult
	// Intent is the leased intent (Leased only).
	Intent *Intent
	// Attempt counts the carrier attempts of the key, this one included (Leased only).
	Attempt int
	// Takeover says the lease taken had expired in another attempt's hands (Leased only).
	Takeover bool
	// HeldUntil is when the other attempt's lease ends (LeaseHeld only).
	HeldUntil time.Time
	// CallerID and Key name the intent's key, when there is one.
	CallerID, Key string
}

// sqlLease leases the keys of pending intents that nobody holds, counts the
// attempt on each key, and returns an outcome per row with the leased
// intents. Each row probes its intent, then its key, through their primary
// keys, in LATERAL subqueries that PostgreSQL cannot merge into a join
// (OFFSET 0, FOR UPDATE), so the plan starts from the batch's rows at any
// table size. A key row another session holds is skipped (SKIP LOCKED), so
// one stuck session delays only its own row. The intent is read without a
// lock: its status only changes together with its key's state, in a
// transaction that holds the key (the completion), and the key's lock
// rechecks that state. The final SELECT reads the rows as they were before
// the statement, which is what tells why a row was not leased.
var sqlLease = `
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
                 FOR UPDATE SKIP LOCKED) k),
     upd AS (
       UPDATE idempotency_keys k
          SET locked_until = now() + make_interval(secs => $3), lease_token = c.token, attempts = coalesce(k.attempts, 0) + 1
         FROM cand c
        WHERE k.caller_id = c.caller_id AND k.idem_key = c.idem_key
       RETURNING c.request_id AS leased, c.prev, k.attempts, k.locked_until)
SELECT inp.request_id,
       CASE WHEN u.leased IS NOT NULL THEN ` + sqlOutcome(Leased) + `
            WHEN i.request_id IS NULL OR k.caller_id IS NULL THEN ` + sqlOutcome(LeaseGone) + `
            WHEN i.status <> 'pending' OR k.state = 'completed' THEN ` + sqlOutcome(LeaseFinal) + `
            WHEN k.locked_until > now() THEN ` + sqlOutcome(LeaseHeld) + `
            ELSE ` + sqlOutcome(LeaseBusy) + ` END,
       coalesce(u.attempts, 0), u.prev IS NOT NULL, k.locked_until, ` + intentColumnsOf + `
  FROM inp
  LEFT JOIN label_intents i ON i.request_id = inp.request_id
  LEFT JOIN idempotency_keys k ON k.caller_id = i.caller_id AND k.idem_key = i.idem_key
  LEFT JOIN upd u ON u.leased = inp.request_id`

// workerLockTimeout bounds what a worker's statement waits for a row lock
// another session holds, where it cannot skip the row.
const workerLockTimeout = 2 * time.Second

// TakeLeases leases the keys of the rows' intents for d, one statement in a
// transaction of its own, and returns an outcome per row, in order. Of two
// rows for one intent, at most the first queued is leased. The leases are
// committed when it returns nil: other attempts see them before the carrier
// is called.
func TakeLeases(ctx context.Context, pool *pgxpool.Pool, rows []LeaseRow, d time.Duration) ([]LeaseOutcome, error) {
	// The statement locks keys in the batch's order, by request id: the
	// order in which [Complete] locks them, so two statements never wait for
	// each other in a cycle. Stable, so that of two rows of one intent the
	// first queued is the one leased.
	order := make([]int, len(rows))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(rows[a].RequestID, rows[b].RequestID) })
	ids, tokens := make([]string, 0, len(rows)), make([]pgtype.UUID, 0, len(rows))
	at := make(map[string]int, len(rows))
	outs := make([]LeaseOutcome, len(rows))
	for _, i := range order {
		r := rows[i]
		if _, dup := at[r.RequestID]; dup {
			outs[i] = LeaseOutcome{Result: LeaseBusy} // its twin holds the row in this statement
			continue
		}
		at[r.RequestID] = i
		ids, tokens = append(ids, r.RequestID), append(tokens, pgUUID(r.Token))
	}
	err := sendShared(ctx, pool, workerLockTimeout, func(b *pgx.Batch) {
		b.Queue(sqlLease, ids, tokens, d.Seconds()).Query(func(rs pgx.Rows) error {
			for rs.Next() {
				var id string
				var o LeaseOutcome
				var until *time.Time
				var s intentScan
				if err := rs.Scan(append([]any{&id, &o.Result, &o.Attempt, &o.Takeover, &until}, s.dest()...)...); err != nil {
					return err
				}
				in, err := s.intent()
				if err != nil {
					return err
				}
				if in != nil {
					o.CallerID, o.Key = in.CallerID, in.Key
				}
				if o.Result == Leased {
					o.Intent = in
				}
				if o.Result == LeaseHeld && until != nil {
					o.HeldUntil = *until
				}
				outs[at[id]] = o
			}
			return rs.Err()
		})
	}, nil)
	if err != nil {
		return nil, err
	}
	return outs, nil
}

package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AcceptRow is one accept: the started key record and the pending intent
// that are stored together or not at all. Their times are the database's:
// created_at is the transaction's now() ([AcceptOutcome.At]), the key's
// expires_at that plus KeyRetention; the rows' own CreatedAt and ExpiresAt
// are not sent.
type AcceptRow struct {
	Key          *Key
	Intent       *Intent
	KeyRetention time.Duration
}

// AcceptResult is what [Accept] did with one row.
type AcceptResult int

const (
	// AcceptStored: the key record and the intent are stored.
	AcceptStored AcceptResult = iota + 1
	// AcceptKeyExists: the key was there (a repeat); nothing was stored.
	AcceptKeyExists
	// AcceptParcelTaken: the key was new but the parcel and version already
	// have a pending or succeeded intent; nothing was stored.
	AcceptParcelTaken
	// AcceptBusy: another accept of the key, or of the parcel and version,
	// has not committed yet (its claim is held); nothing was stored and
	// nothing waited for it. The row may be tried again with
	// [AcceptOpts.Wait]. Never an outcome of a call with Wait.
	AcceptBusy
)

// AcceptOutcome is the outcome of one row.
type AcceptOutcome struct {
	Result AcceptResult
	// PurgedBefore says a tombstone matches the key: it was completed and
	// purged before (a retry after the retention, or a client reusing keys).
	PurgedBefore bool
	// At is the transaction's time (now()): created_at of what it stored.
	At time.Time
}

// AcceptOpts tunes [Accept].
type AcceptOpts struct {
	// LockTimeout bounds any wait for a lock; the statement then fails
	// with lock_timeout (see [IsLockTimeout]).
	LockTimeout time.Duration
	// Wait has the rows wait for the claims of concurrent accepts of their
	// keys and parcels (at most LockTimeout) instead of answering
	// [AcceptBusy]: for a row tried again alone. The claims are taken in
	// one order, so two calls that wait never wait for each other in a
	// cycle.
	Wait bool
	// BeforeCommitFunc, when set, runs after the rows are written and before
	// the commit; an error rolls everything back. For fault-injection tests.
	BeforeCommitFunc func(ctx context.Context) error
}

// The claims of an accept, in the transaction-level advisory locks of
// PostgreSQL: one on the key, one on the parcel and version, each a hash of
// its columns of the row x. An accept holds both from before its inserts to
// its commit, so a row whose claims another accept holds is one whose insert
// would wait for that accept's commit. A collision of two hashes only makes
// a row busy, never wrong.
const (
	keyClaim    = `hashtextextended(x.caller_id || '/' || x.idem_key, 1)`
	parcelClaim = `hashtextextended(x.caller_id || '/' || x.order_id || '/' || x.parcel_no || '/' || x.label_version, 2)`
)

// sqlAccept inserts the keys, then the intents of the keys it inserted with
// their rows of the relay's queue (label_intent_outbox, with the caller the
// relay takes turns by and the traceparent, NULL while tracing is off), and
// says for each row whether both were stored, whether the key existed or the parcel was taken, whether the row was busy,
// and whether a tombstone matches. Rows of one call that share a key or a
// parcel are told apart by the unique indexes themselves: the first stores,
// the others find the key existing or the parcel taken.
//
// It waits for no other session (design.md, Locks and stuck sessions). A
// key, or a pending or succeeded intent of the parcel, that the statement's
// snapshot holds answers its row from there, and the row inserts nothing: an
// insert would wait for whatever session holds that row (a worker frozen
// inside its transaction, the sweeper's purge in flight), and the accept
// answers a stored key or parcel from a read of the record anyway. A row
// whose claims another accept holds (it has not committed) is busy: the
// claims are tried, never waited for. What can still make the statement
// wait, up to the lock timeout, is a key or an intent committed after it
// began and held by another session since, or an insert by a session that
// takes no claims. The look-ups (the tombstone's too) are scalar subqueries with LIMIT
// 1, not EXISTS: PostgreSQL may plan an EXISTS as a hashed subplan, which
// reads the whole table on every run of a generic plan made while it was
// small.
var sqlAccept = `
WITH inp AS (
       SELECT *, now() AS created_at, now() + make_interval(secs => retention) AS expires_at
         FROM unnest($1::text[], $2::text[], $3::bytea[], $4::int2[], $5::text[], $6::float8[],
                            $7::bigint[], $8::int[], $9::int[], $10::jsonb[], $11::text[], $12::text[])
         AS t(caller_id, idem_key, request_hash, fingerprint_version, request_id, retention,
              order_id, parcel_no, label_version, payload, carrier_key, traceparent)),
     claim AS MATERIALIZED (
       SELECT x.request_id, x.key_seen, x.parcel_seen,
              CASE WHEN x.key_seen OR x.parcel_seen THEN false
                   WHEN pg_try_advisory_xact_lock(` + keyClaim + `) THEN pg_try_advisory_xact_lock(` + parcelClaim + `)
                   ELSE false END AS claimed
         FROM (SELECT inp.*,
                      (SELECT true FROM idempotency_keys k
                        WHERE k.caller_id = inp.caller_id AND k.idem_key = inp.idem_key LIMIT 1) IS NOT NULL AS key_seen,
                      (SELECT true FROM label_intents i
                        WHERE i.caller_id = inp.caller_id AND i.order_id = inp.order_id AND i.parcel_no = inp.parcel_no
                          AND i.label_version = inp.label_version AND i.status IN ('pending', 'succeeded') LIMIT 1) IS NOT NULL AS parcel_seen
                 FROM inp OFFSET 0) x),
     k AS (
       INSERT INTO idempotency_keys
              (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, created_at, expires_at)
       SELECT caller_id, idem_key, request_hash, fingerprint_version, request_id, 'started', created_at, expires_at
         FROM inp
        WHERE request_id IN (SELECT request_id FROM claim WHERE claimed)
       ON CONFLICT (caller_id, idem_key) DO NOTHING
       RETURNING request_id),
     i AS (
       INSERT INTO label_intents
              (request_id, caller_id, idem_key, request_hash, fingerprint_version,
               order_id, parcel_no, label_version, payload, carrier_key, created_at)
       SELECT inp.request_id, inp.caller_id, inp.idem_key, inp.request_hash, inp.fingerprint_version,
              inp.order_id, inp.parcel_no, inp.label_version, inp.payload, inp.carrier_key, inp.created_at
         FROM inp JOIN k ON k.request_id = inp.request_id
       ON CONFLICT (caller_id, order_id, parcel_no, label_version)
          WHERE status IN ('pending', 'succeeded') DO NOTHING
       RETURNING request_id, caller_id, created_at),
     o AS (
       INSERT INTO label_intent_outbox (created_at, request_id, caller_id, traceparent)
       SELECT i.created_at, i.request_id, i.caller_id, inp.traceparent FROM i JOIN inp USING (request_id))
SELECT inp.request_id,
       CASE WHEN i.request_id IS NOT NULL THEN ` + sqlOutcome(AcceptStored) + `
            WHEN c.key_seen THEN ` + sqlOutcome(AcceptKeyExists) + `
            WHEN c.parcel_seen THEN ` + sqlOutcome(AcceptParcelTaken) + `
            WHEN NOT c.claimed THEN ` + sqlOutcome(AcceptBusy) + `
            WHEN k.request_id IS NULL THEN ` + sqlOutcome(AcceptKeyExists) + `
            ELSE ` + sqlOutcome(AcceptParcelTaken) + ` END,
       (SELECT true FROM idempotency_tombstones t
         WHERE t.caller_id = inp.caller_id AND t.key_hash = sha256(convert_to(inp.idem_key, 'UTF8')) LIMIT 1) IS NOT NULL
  FROM inp JOIN claim c ON c.request_id = inp.request_id
  LEFT JOIN k ON k.request_id = inp.request_id LEFT JOIN i ON i.request_id = inp.request_id`

// sqlAwaitClaims takes the claims of the rows (keyClaim, parcelClaim),
// waiting for the accepts that hold them to end, in the order of the
// claims: the calls with [AcceptOpts.Wait].
const sqlAwaitClaims = `
SELECT count(pg_advisory_xact_lock(c))
  FROM (SELECT DISTINCT c
          FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[], $5::int[])
            AS x(caller_id, idem_key, order_id, parcel_no, label_version)
         CROSS JOIN LATERAL (VALUES (` + keyClaim + `), (` + parcelClaim + `)) v(c)
         ORDER BY c OFFSET 0) s`

// sqlUnclaimParcelTaken removes, in the same transaction, the keys inserted
// for a parcel that turned out to be taken: their accepts store nothing. The
// intent is looked up per row, through its primary key (a scalar subquery),
// never by an anti join over the whole intents table.
const sqlUnclaimParcelTaken = `
DELETE FROM idempotency_keys d
 USING unnest($1::text[], $2::text[], $3::text[]) AS x(caller_id, idem_key, request_id)
 WHERE d.caller_id = x.caller_id AND d.idem_key = x.idem_key AND d.request_id = x.request_id
   AND (SELECT count(*) FROM label_intents i WHERE i.request_id = x.request_id) = 0`

// Accept stores each row's key record and intent in one transaction, sent
// in one round trip, and returns an outcome per row, in order. After it
// returns nil, what it stored is committed; after an error, nothing is.
func Accept(ctx context.Context, pool *pgxpool.Pool, rows []AcceptRow, opts AcceptOpts) ([]AcceptOutcome, error) {
	n := len(rows)
	var (
		callers, keys, ids, carrierKeys = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		traceparents                    = make([]*string, n) // nil: NULL
		hashes, payloads                = make([][]byte, n), make([][]byte, n)
		versions                        = make([]int16, n)
		retentions                      = make([]float64, n)
		orders                          = make([]int64, n)
		parcels, labelVersions          = make([]int, n), make([]int, n)
		at                              = make(map[string]int, n)
	)
	for j, row := range rows {
		k, in := row.Key, row.Intent
		payload, err := json.Marshal(in.Parcel)
		if err != nil {
			return nil, err
		}
		at[k.RequestID] = j
		callers[j], keys[j], ids[j], carrierKeys[j] = k.CallerID, k.Key, k.RequestID, in.CarrierKey
		hashes[j], payloads[j], versions[j] = k.RequestHash, payload, int16(k.FingerprintVersion)
		retentions[j] = row.KeyRetention.Seconds()
		if in.Traceparent != "" {
			traceparents[j] = &in.Traceparent
		}
		orders[j], parcels[j], labelVersions[j] = in.Parcel.OrderID, in.Parcel.ParcelNo, in.Parcel.LabelVersion
	}
	outs := make([]AcceptOutcome, n)
	var txNow time.Time // the transaction's now(), read in the same round trip
	err := sendShared(ctx, pool, opts.LockTimeout, func(b *pgx.Batch) {
		if opts.Wait {
			b.Queue(sqlAwaitClaims, callers, keys, orders, parcels, labelVersions)
		}
		b.Queue(`SELECT now()`).QueryRow(func(r pgx.Row) error { return r.Scan(&txNow) })
		b.Queue(sqlAccept, callers, keys, hashes, versions, ids, retentions, orders, parcels, labelVersions, payloads, carrierKeys, traceparents).
			Query(func(rs pgx.Rows) error {
				var id string
				var o AcceptOutcome
				_, err := pgx.ForEachRow(rs, []any{&id, &o.Result, &o.PurgedBefore}, func() error {
					outs[at[id]] = o
					return nil
				})
				return err
			})
		b.Queue(sqlUnclaimParcelTaken, callers, keys, ids)
	}, opts.BeforeCommitFunc)
	if err != nil {
		return nil, err
	}
	for i := range outs {
		outs[i].At = txNow
	}
	return outs, nil
}

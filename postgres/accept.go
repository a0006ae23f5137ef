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
	// LockTimeout bounds the wait for a concurrent accept of the same key
	// that has not committed yet; the statement then fails with
	// lock_timeout (see [IsLockTimeout]).
	LockTimeout time.Duration
	// BeforeCommitFunc, when set, runs after the rows are written and before
	// the commit; an error rolls everything back. For fault-injection tests.
	BeforeCommitFunc func(ctx context.Context) error
}

// sqlAccept inserts the keys, then the intents of the keys it inserted with
// their rows of the relay's queue (label_intent_outbox), and says for each row whether both were stored, whether the key existed, and
// whether a tombstone matches. Rows of one call that share a key or a parcel
// are told apart by the unique indexes themselves: the first stores, the
// others find the key existing or the parcel taken.
const sqlAccept = `
WITH inp AS (
       SELECT *, now() AS created_at, now() + make_interval(secs => retention) AS expires_at
         FROM unnest($1::text[], $2::text[], $3::bytea[], $4::int2[], $5::text[], $6::float8[],
                            $7::bigint[], $8::int[], $9::int[], $10::jsonb[], $11::text[])
         AS t(caller_id, idem_key, request_hash, fingerprint_version, request_id, retention,
              order_id, parcel_no, label_version, payload, carrier_key)),
     k AS (
       INSERT INTO idempotency_keys
              (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, created_at, expires_at)
       SELECT caller_id, idem_key, request_hash, fingerprint_version, request_id, 'started', created_at, expires_at
         FROM inp
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
       RETURNING request_id, created_at),
     o AS (
       INSERT INTO label_intent_outbox (created_at, request_id)
       SELECT created_at, request_id FROM i)
SELECT inp.request_id, i.request_id IS NOT NULL, k.request_id IS NULL,
       EXISTS (SELECT 1 FROM idempotency_tombstones t
                WHERE t.caller_id = inp.caller_id AND t.key_hash = sha256(convert_to(inp.idem_key, 'UTF8')))
  FROM inp LEFT JOIN k ON k.request_id = inp.request_id LEFT JOIN i ON i.request_id = inp.request_id`

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
		orders[j], parcels[j], labelVersions[j] = in.Parcel.OrderID, in.Parcel.ParcelNo, in.Parcel.LabelVersion
	}
	outs := make([]AcceptOutcome, n)
	var txNow time.Time // the transaction's now(), read in the same round trip
	err := sendShared(ctx, pool, opts.LockTimeout, func(b *pgx.Batch) {
		b.Queue(`SELECT now()`).QueryRow(func(r pgx.Row) error { return r.Scan(&txNow) })
		b.Queue(sqlAccept, callers, keys, hashes, versions, ids, retentions, orders, parcels, labelVersions, payloads, carrierKeys).
			Query(func(rs pgx.Rows) error {
				var id string
				var stored, keyExisted, purged bool
				_, err := pgx.ForEachRow(rs, []any{&id, &stored, &keyExisted, &purged}, func() error {
					o := AcceptOutcome{Result: AcceptParcelTaken, PurgedBefore: purged}
					switch {
					case stored:
						o.Result = AcceptStored
					case keyExisted:
						o.Result = AcceptKeyExists
					}
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

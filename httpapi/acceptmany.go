package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/outbox"
)

// Group commit of accepts: the accepts that arrive while others are being
// written share one transaction, sent in one round trip (see internal/group
// and docs/design.md). For each accept the transaction does what acceptTx
// does alone: it stores the key record and the intent together, or neither.

// acceptIn is one accept for the shared transaction.
type acceptIn struct {
	rec    *idempotency.Record
	intent *outbox.Intent
}

// acceptOut is what the shared transaction did for one accept: stored both
// rows; found the key taken (a repeat: nothing stored); or stored the key but
// found the parcel taken (and removed the key again before the commit).
type acceptOut struct {
	sent       bool // false: not in the statement (a duplicate within the batch)
	stored     bool
	keyExisted bool
	purged     bool // a tombstone matches the key
}

// sqlAcceptMany inserts the keys, then the intents of the keys it inserted,
// and says for each accept what it did and whether a tombstone matches.
const sqlAcceptMany = `
WITH inp AS (
       SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::int2[], $5::text[], $6::timestamptz[],
                            $7::timestamptz[], $8::bigint[], $9::int[], $10::int[], $11::jsonb[], $12::text[])
         AS t(caller_id, idem_key, request_hash, fingerprint_version, request_id, created_at,
              expires_at, order_id, parcel_no, label_version, payload, carrier_key)),
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
       RETURNING request_id)
SELECT inp.request_id, i.request_id IS NOT NULL, k.request_id IS NULL,
       EXISTS (SELECT 1 FROM idempotency_tombstones t
                WHERE t.caller_id = inp.caller_id AND t.key_hash = sha256(convert_to(inp.idem_key, 'UTF8')))
  FROM inp LEFT JOIN k ON k.request_id = inp.request_id LEFT JOIN i ON i.request_id = inp.request_id`

// sqlUnclaimParcelTaken removes, in the same transaction, the keys inserted
// for a parcel that turned out to be taken: their accepts store nothing. The
// intent is looked up per accept, through its primary key (a scalar
// subquery): written as NOT EXISTS, the planner may make it an anti join
// that scans the whole intents table, as it did while the table was small.
const sqlUnclaimParcelTaken = `
DELETE FROM idempotency_keys d
 USING unnest($1::text[], $2::text[], $3::text[]) AS x(caller_id, idem_key, request_id)
 WHERE d.caller_id = x.caller_id AND d.idem_key = x.idem_key AND d.request_id = x.request_id
   AND (SELECT count(*) FROM label_intents i WHERE i.request_id = x.request_id) = 0`

// sqlAcceptSettings is the shared accept's lock_timeout ($1) and plan settings.
const sqlAcceptSettings = `SELECT set_config('lock_timeout', $1, true), set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_seqscan', 'off', true)`

// acceptMany runs one shared accept transaction in one round trip: BEGIN,
// lock_timeout, the inserts, the removal of keys whose parcel was taken,
// COMMIT. Two accepts of one batch with the same key, or the same parcel, are
// not sent together: the later ones are answered as not sent, and go the
// one-accept way.
func (s *Server) acceptMany(ctx context.Context, ins []acceptIn) ([]acceptOut, error) {
	n := len(ins)
	var (
		callers, keys, ids, carrierKeys = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		hashes, payloads                = make([][]byte, 0, n), make([][]byte, 0, n)
		versions                        = make([]int16, 0, n)
		created, expires                = make([]time.Time, 0, n), make([]time.Time, 0, n)
		orders                          = make([]int64, 0, n)
		parcels, labelVersions          = make([]int, 0, n), make([]int, 0, n)
	)
	at := make(map[string]int, n)
	type parcelID struct {
		caller          string
		order           int64
		parcel, version int
	}
	seenKey := make(map[[2]string]bool, n)
	seenParcel := make(map[parcelID]bool, n)
	for j, a := range ins {
		r, in := a.rec, a.intent
		p := parcelID{r.CallerID, in.Parcel.OrderID, in.Parcel.ParcelNo, in.Parcel.LabelVersion}
		if seenKey[[2]string{r.CallerID, r.Key}] || seenParcel[p] {
			continue
		}
		seenKey[[2]string{r.CallerID, r.Key}], seenParcel[p] = true, true
		payload, err := json.Marshal(in.Parcel)
		if err != nil {
			return nil, err
		}
		at[r.RequestID] = j
		callers, keys, ids, carrierKeys = append(callers, r.CallerID), append(keys, r.Key), append(ids, r.RequestID), append(carrierKeys, in.CarrierKey)
		hashes, payloads = append(hashes, r.RequestHash), append(payloads, payload)
		versions = append(versions, int16(r.FingerprintVersion))
		created, expires = append(created, r.CreatedAt), append(expires, r.ExpiresAt)
		orders = append(orders, in.Parcel.OrderID)
		parcels, labelVersions = append(parcels, in.Parcel.ParcelNo), append(labelVersions, in.Parcel.LabelVersion)
	}

	conn, err := s.deps.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	outs := make([]acceptOut, n)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// Both statements have one good plan whatever their arrays hold, and
	// planning them costs more than running them: PostgreSQL would plan
	// each run anew (the generic plan of an unnest looks dearer than the
	// custom ones), so it is told to keep the generic plan. That plan is
	// made once per connection, with the statistics of the moment; without
	// sequential scans it probes the tombstones per accept even when it is
	// made on an empty table (jobs.queryGeneric says more).
	b.Queue(sqlAcceptSettings, fmt.Sprintf("%dms", s.deps.ClaimWait.Milliseconds()))
	b.Queue(sqlAcceptMany, callers, keys, hashes, versions, ids, created, expires, orders, parcels, labelVersions, payloads, carrierKeys).
		Query(func(rows pgx.Rows) error {
			var id string
			var o acceptOut
			_, err := pgx.ForEachRow(rows, []any{&id, &o.stored, &o.keyExisted, &o.purged}, func() error {
				o.sent = true
				outs[at[id]] = o
				return nil
			})
			return err
		})
	b.Queue(sqlUnclaimParcelTaken, callers, keys, ids)
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		// The transaction is aborted (or its outcome unknown): end it, or
		// drop the connection. Every accept of the batch then goes alone.
		if _, rerr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck // a broken connection is not reused
		}
		return nil, err
	}
	return outs, nil
}

// acceptShared runs one accept through the shared transaction. ok false
// means it has no answer (the statement failed, or left the accept out), and
// the accept goes alone.
func (s *Server) acceptShared(ctx context.Context, rec *idempotency.Record, intent *outbox.Intent, hash []byte) (d *decision, ok bool, err error) {
	out, err := s.accepts.Do(acceptIn{rec: rec, intent: intent})
	switch {
	case err != nil:
		s.deps.Log.Debug().Err(err).Msg("the shared accept failed: accepting alone")
		return nil, false, nil
	case !out.sent:
		return nil, false, nil
	case out.stored:
		s.deps.Notifier.Notify(notify.ChannelIntents, "")
		return &decision{outcome: metrics.OutcomeNew, intent: intent, purgedKey: out.purged}, true, nil
	case out.keyExisted:
		// A concurrent request stored the key after this one's read-first:
		// answer from what it stored.
		d, err := s.storedAnswer(ctx, rec.CallerID, rec.Key, hash)
		if d == nil || err != nil {
			// Gone since (purged): the accept starts over, alone.
			return nil, false, err
		}
		d.purgedKey = out.purged
		return d, true, nil
	default:
		// The key was free but the parcel taken: nothing was stored.
		d, err := s.parcelTaken(ctx, rec.CallerID, intent.Parcel, hash)
		if err != nil {
			return nil, false, err
		}
		d.purgedKey = out.purged
		return d, true, nil
	}
}

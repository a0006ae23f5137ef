package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// States of a record.
const (
	StateStarted   = "started"
	StateCompleted = "completed"
)

// DBTX is what the single-statement functions need: a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Record is one row of idempotency_keys.
type Record struct {
	CallerID           string
	Key                string
	RequestHash        []byte
	FingerprintVersion int
	RequestID          string
	State              string
	LockedUntil        *time.Time
	LeaseToken         *uuid.UUID
	ResponseStatus     int
	ResponseBody       []byte
	CreatedAt          time.Time
	ExpiresAt          time.Time
}

// Errors of the record's life.
var (
	ErrNotFound  = errors.New("idempotency: no such key")
	ErrCompleted = errors.New("idempotency: key already completed")
	ErrFenced    = errors.New("idempotency: lease no longer ours")
)

// LeaseHeldError says another attempt holds the key until Until.
type LeaseHeldError struct{ Until time.Time }

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("idempotency: lease held until %s", e.Until.Format(time.RFC3339Nano))
}

const recordColumns = `caller_id, idem_key, request_hash, fingerprint_version, request_id, state,
	locked_until, lease_token, coalesce(response_status, 0), response_body::text, created_at, expires_at`

func scanRecord(row pgx.Row) (*Record, error) {
	var r Record
	var body *string
	err := row.Scan(&r.CallerID, &r.Key, &r.RequestHash, &r.FingerprintVersion, &r.RequestID, &r.State,
		&r.LockedUntil, &r.LeaseToken, &r.ResponseStatus, &body, &r.CreatedAt, &r.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if body != nil {
		r.ResponseBody = []byte(*body)
	}
	return &r, nil
}

// InsertResult is what [QueueInsert] found once its batch has run.
type InsertResult struct {
	// Inserted says the record was new; otherwise the key existed (read it
	// with [Get] after rolling back).
	Inserted bool
	// PurgedBefore says a tombstone matches the key: it was completed and
	// purged before (a retry after the retention, or a client reusing keys).
	PurgedBefore bool
}

// QueueInsert queues, on a batch that runs inside the caller's transaction,
// the insert of a started record unless (caller, key) exists, together with
// the tombstone look-up, as one statement. A concurrent insert of the same key
// that has not committed yet makes the statement wait for it (bounded by the
// transaction's lock_timeout). The result is filled in when the batch runs.
//
// Queuing instead of executing lets the accept send its whole transaction in
// one round trip: the insert, the intent's insert, and then one commit.
func QueueInsert(b *pgx.Batch, r *Record, res *InsertResult) {
	b.Queue(`
		WITH ins AS (
			INSERT INTO idempotency_keys
			       (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, 'started', $6, $7)
			ON CONFLICT (caller_id, idem_key) DO NOTHING
			RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM ins),
		       EXISTS (SELECT 1 FROM idempotency_tombstones WHERE caller_id = $1 AND key_hash = sha256(convert_to($2, 'UTF8')))`,
		r.CallerID, r.Key, r.RequestHash, r.FingerprintVersion, r.RequestID, r.CreatedAt, r.ExpiresAt,
	).QueryRow(func(row pgx.Row) error {
		return row.Scan(&res.Inserted, &res.PurgedBefore)
	})
}

// Get reads one record.
func Get(ctx context.Context, db DBTX, callerID, key string) (*Record, error) {
	return scanRecord(db.QueryRow(ctx, `SELECT `+recordColumns+` FROM idempotency_keys WHERE caller_id = $1 AND idem_key = $2`, callerID, key))
}

// Lease gives the key to a new attempt for d: it succeeds when the record is
// started and nobody holds a live lease, and returns the attempt's fresh token
// and whether it took over a lease that had expired. A completed record is
// [ErrCompleted]; a live lease is a [*LeaseHeldError]. The caller commits the
// transaction before calling the carrier, so that other attempts see the claim.
func Lease(ctx context.Context, tx pgx.Tx, callerID, key string, d time.Duration) (token uuid.UUID, takeover bool, attempt int, err error) {
	token = uuid.New()
	var prev *uuid.UUID
	err = tx.QueryRow(ctx, `
		WITH old AS (
			SELECT caller_id, idem_key, lease_token
			  FROM idempotency_keys
			 WHERE caller_id = $1 AND idem_key = $2 AND state = 'started'
			   AND (locked_until IS NULL OR locked_until <= now())
			   FOR UPDATE)
		UPDATE idempotency_keys k
		   SET locked_until = now() + make_interval(secs => $3), lease_token = $4, attempts = coalesce(k.attempts, 0) + 1
		  FROM old
		 WHERE k.caller_id = old.caller_id AND k.idem_key = old.idem_key
		RETURNING old.lease_token, k.attempts`, callerID, key, d.Seconds(), token).Scan(&prev, &attempt)
	if err == nil {
		return token, prev != nil, attempt, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, false, 0, err
	}
	r, err := Get(ctx, tx, callerID, key)
	if err != nil {
		return uuid.Nil, false, 0, err
	}
	if r.State == StateCompleted {
		return uuid.Nil, false, 0, ErrCompleted
	}
	if r.LockedUntil != nil {
		return uuid.Nil, false, 0, &LeaseHeldError{Until: *r.LockedUntil}
	}
	return uuid.Nil, false, 0, fmt.Errorf("idempotency: key %q neither leasable nor leased", key)
}

// Release gives the lease back early (after an unknown carrier outcome), so
// that the next attempt need not wait for it to expire. It does nothing when
// the lease is no longer ours.
func Release(ctx context.Context, db DBTX, callerID, key string, token uuid.UUID) error {
	_, err := db.Exec(ctx, `
		UPDATE idempotency_keys SET locked_until = NULL, lease_token = NULL
		 WHERE caller_id = $1 AND idem_key = $2 AND state = 'started' AND lease_token = $3`,
		callerID, key, token)
	return err
}

// Complete saves the final response and the expiry, only if the record is
// still started and leased with token (fencing). Otherwise it returns
// [ErrFenced] and the caller must roll back everything it wrote in tx.
func Complete(ctx context.Context, tx pgx.Tx, callerID, key string, token uuid.UUID, status int, body []byte, retention time.Duration) error {
	tag, err := tx.Exec(ctx, `
		UPDATE idempotency_keys
		   SET state = 'completed', locked_until = NULL, lease_token = NULL, attempts = NULL,
		       response_status = $4, response_body = $5::text::json,
		       expires_at = now() + make_interval(secs => $6)
		 WHERE caller_id = $1 AND idem_key = $2 AND state = 'started' AND lease_token = $3`,
		callerID, key, token, status, string(body), retention.Seconds())
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrFenced
	}
	return nil
}

// Purge deletes up to batch completed records whose expires_at is before now,
// oldest first, skipping rows another sweeper holds, leaves a tombstone for
// each, and returns how many it deleted. Callers loop until it returns fewer
// than batch.
func Purge(ctx context.Context, db DBTX, now time.Time, batch int) (int64, error) {
	tag, err := db.Exec(ctx, `
		WITH gone AS (
			DELETE FROM idempotency_keys
			 WHERE ctid IN (SELECT ctid FROM idempotency_keys
			                 WHERE state = 'completed' AND expires_at < $1
			                 ORDER BY expires_at
			                 LIMIT $2
			                   FOR UPDATE SKIP LOCKED)
			RETURNING caller_id, idem_key)
		INSERT INTO idempotency_tombstones (caller_id, key_hash, purged_at)
		SELECT caller_id, sha256(convert_to(idem_key, 'UTF8')), $1 FROM gone
		ON CONFLICT (caller_id, key_hash) DO UPDATE SET purged_at = EXCLUDED.purged_at`, now, batch)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// PurgeTombstones deletes up to batch tombstones older than before and
// returns how many it deleted.
func PurgeTombstones(ctx context.Context, db DBTX, before time.Time, batch int) (int64, error) {
	tag, err := db.Exec(ctx, `
		DELETE FROM idempotency_tombstones
		 WHERE ctid IN (SELECT ctid FROM idempotency_tombstones
		                 WHERE purged_at < $1
		                 ORDER BY purged_at
		                 LIMIT $2
		                   FOR UPDATE SKIP LOCKED)`, before, batch)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// States of a key record.
const (
	StateStarted   = "started"
	StateCompleted = "completed"
)

// Key is one row of idempotency_keys: the record of one (caller, key).
type Key struct {
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

const keyColumns = `caller_id, idem_key, request_hash, fingerprint_version, request_id, state,
	locked_until, lease_token, coalesce(response_status, 0), response_body::text, created_at, expires_at`

// GetKey reads the record of (callerID, key).
func GetKey(ctx context.Context, db DB, callerID, key string) (*Key, error) {
	var r Key
	var body *string
	err := db.QueryRow(ctx, `SELECT `+keyColumns+` FROM idempotency_keys WHERE caller_id = $1 AND idem_key = $2`, callerID, key).
		Scan(&r.CallerID, &r.Key, &r.RequestHash, &r.FingerprintVersion, &r.RequestID, &r.State,
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

// Lease identifies the lease of one attempt on one key.
type Lease struct {
	CallerID string
	Key      string
	Token    uuid.UUID
}

// Release gives leases back early (after an unknown carrier outcome), so that
// the next attempt need not wait for them to expire. A lease that is no
// longer its attempt's is left alone. It waits at most lockTimeout for a row
// another session holds.
func Release(ctx context.Context, pool *pgxpool.Pool, leases []Lease, lockTimeout time.Duration) error {
	callers, keys, tokens := make([]string, len(leases)), make([]string, len(leases)), make([]pgtype.UUID, len(leases))
	for i, l := range leases {
		callers[i], keys[i], tokens[i] = l.CallerID, l.Key, pgUUID(l.Token)
	}
	return sendShared(ctx, pool, lockTimeout, func(b *pgx.Batch) {
		b.Queue(`
			UPDATE idempotency_keys k SET locked_until = NULL, lease_token = NULL
			  FROM unnest($1::text[], $2::text[], $3::uuid[]) AS x(caller_id, idem_key, token)
			 WHERE k.caller_id = x.caller_id AND k.idem_key = x.idem_key
			   AND k.state = 'started' AND k.lease_token = x.token`, callers, keys, tokens)
	}, nil)
}

// Purge deletes up to batch completed records whose expires_at has passed
// by the database's clock (now(): the clock that set it at completion; no
// process clock takes part), oldest first, skipping rows another sweeper
// holds, leaves a tombstone for each (so that a retry after the retention is
// noticed), and returns how many it deleted. Callers loop until it returns
// fewer than batch.
func Purge(ctx context.Context, db DB, batch int) (int64, error) {
	sql, args := PurgeSQL(ctx, `
		WITH gone AS (
			DELETE FROM idempotency_keys
			 WHERE ctid IN (SELECT ctid FROM idempotency_keys
			                 WHERE state = 'completed' AND expires_at < now()
			                 ORDER BY expires_at
			                 LIMIT $1
			                   FOR UPDATE SKIP LOCKED)
			RETURNING caller_id, idem_key)
		INSERT INTO idempotency_tombstones (caller_id, key_hash, purged_at)
		SELECT caller_id, sha256(convert_to(idem_key, 'UTF8')), now() FROM gone
		ON CONFLICT (caller_id, key_hash) DO UPDATE SET purged_at = EXCLUDED.purged_at`, 2)
	tag, err := db.Exec(ctx, sql, append([]any{batch}, args...)...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// PurgeTombstones deletes up to batch tombstones purged more than retention
// ago by the database's clock and returns how many it deleted.
func PurgeTombstones(ctx context.Context, db DB, retention time.Duration, batch int) (int64, error) {
	return purgeOldest(ctx, db, "idempotency_tombstones", "purged_at < "+sqlAgo, "purged_at", retention, batch)
}

// sqlAgo is the database's time ($1 seconds ago) that purgeOldest's
// conditions compare with (under [AsOf], that time $1 seconds ago).
const sqlAgo = `now() - make_interval(secs => $1)`

// purgeOldest deletes up to batch rows of table that match cond ($1 is the
// retention in seconds, see sqlAgo), oldest by orderBy first, skipping rows
// another sweeper holds, and returns how many it deleted. table, cond and
// orderBy are the callers' constants, never input.
func purgeOldest(ctx context.Context, db DB, table, cond, orderBy string, retention time.Duration, batch int) (int64, error) {
	sql, args := PurgeSQL(ctx, `
		DELETE FROM `+table+`
		 WHERE ctid IN (SELECT ctid FROM `+table+`
		                 WHERE `+cond+`
		                 ORDER BY `+orderBy+`
		                 LIMIT $2
		                   FOR UPDATE SKIP LOCKED)`, 3)
	tag, err := db.Exec(ctx, sql, append([]any{retention.Seconds(), batch}, args...)...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

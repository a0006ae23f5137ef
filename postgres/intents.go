package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labelkit/labels"
)

// Intent is one row of label_intents: an accepted request for a label, the
// outbox row the relay turns into a River job.
type Intent struct {
	RequestID          string
	CallerID           string
	Key                string
	RequestHash        []byte
	FingerprintVersion int
	Parcel             labels.Parcel
	CarrierKey         string
	Status             string
	LabelID            string
	Error              []byte // the saved problem of a failed intent
	CreatedAt          time.Time
	CompletedAt        *time.Time
}

// intentColumns are the columns scanIntent reads, in its order.
const intentColumns = `request_id, caller_id, idem_key, request_hash, fingerprint_version, payload,
	carrier_key, status, coalesce(label_id, ''), error::text, created_at, completed_at`

// intentColumnsOf is intentColumns of the table aliased i.
const intentColumnsOf = `i.request_id, i.caller_id, i.idem_key, i.request_hash, i.fingerprint_version, i.payload,
	i.carrier_key, i.status, coalesce(i.label_id, ''), i.error::text, i.created_at, i.completed_at`

// intentScan holds a row of intentColumns as scanned, NULLs included (an
// outer join that found no intent).
type intentScan struct {
	requestID, callerID, key, carrierKey, status, labelID *string
	hash, payload                                         []byte
	version                                               *int
	problem                                               *string
	createdAt, completedAt                                *time.Time
}

func (s *intentScan) dest() []any {
	return []any{&s.requestID, &s.callerID, &s.key, &s.hash, &s.version, &s.payload,
		&s.carrierKey, &s.status, &s.labelID, &s.problem, &s.createdAt, &s.completedAt}
}

// intent returns the scanned intent, nil when the row held none.
func (s *intentScan) intent() (*Intent, error) {
	if s.requestID == nil {
		return nil, nil
	}
	in := &Intent{RequestID: *s.requestID, CallerID: *s.callerID, Key: *s.key, RequestHash: s.hash, FingerprintVersion: *s.version,
		CarrierKey: *s.carrierKey, Status: *s.status, LabelID: *s.labelID, CreatedAt: *s.createdAt,
		CompletedAt: s.completedAt}
	if err := json.Unmarshal(s.payload, &in.Parcel); err != nil {
		return nil, err
	}
	if s.problem != nil {
		in.Error = []byte(*s.problem)
	}
	return in, nil
}

func getIntent(row pgx.Row) (*Intent, error) {
	var s intentScan
	err := row.Scan(s.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return s.intent()
}

// GetIntent reads an intent by request id, scoped to callerID unless it is empty.
func GetIntent(ctx context.Context, db DB, callerID, requestID string) (*Intent, error) {
	return getIntent(db.QueryRow(ctx, `SELECT `+intentColumns+` FROM label_intents
		WHERE request_id = $1 AND ($2 = '' OR caller_id = $2)`, requestID, callerID))
}

// GetIntentByKey reads the caller's newest intent made under key.
func GetIntentByKey(ctx context.Context, db DB, callerID, key string) (*Intent, error) {
	return getIntent(db.QueryRow(ctx, `SELECT `+intentColumns+` FROM label_intents
		WHERE caller_id = $1 AND idem_key = $2 ORDER BY created_at DESC LIMIT 1`, callerID, key))
}

// GetIntentByParcel reads the pending or succeeded intent of a parcel and version.
func GetIntentByParcel(ctx context.Context, db DB, callerID string, orderID int64, parcelNo, labelVersion int) (*Intent, error) {
	return getIntent(db.QueryRow(ctx, `SELECT `+intentColumns+` FROM label_intents
		WHERE caller_id = $1 AND order_id = $2 AND parcel_no = $3 AND label_version = $4
		  AND status IN ('pending', 'succeeded')`, callerID, orderID, parcelNo, labelVersion))
}

// DispatchFunc enqueues one job per request id inside tx.
type DispatchFunc func(ctx context.Context, tx pgx.Tx, requestIDs []string) error

// sqlDispatch takes up to $1 of the oldest rows of the relay's queue,
// skipping those another relay holds, deletes them and returns their request
// ids; the rows it locked are deleted by their ctid (a TID scan, whatever the
// queue's size). It runs as a one-off statement (always planned with the
// table's current size): the relay runs it a few times a second at most.
const sqlDispatch = `
DELETE FROM label_intent_outbox
 WHERE ctid = ANY (ARRAY (SELECT ctid FROM label_intent_outbox
                           ORDER BY created_at
                           LIMIT $1
                             FOR UPDATE SKIP LOCKED))
RETURNING request_id`

// DispatchIntents takes up to batch undispatched intents off the relay's
// queue and hands their request ids to dispatch, in one transaction: the jobs
// and the queue's deletes commit together. Several relays at once never
// dispatch an intent twice. It returns how many it dispatched.
func DispatchIntents(ctx context.Context, pool *pgxpool.Pool, batch int, dispatch DispatchFunc) (int, error) {
	return dispatchBatch(ctx, pool, sqlDispatch, batch, dispatch)
}

// dispatchBatch runs take (a statement that takes at most $1 rows off a
// queue, RETURNING request_id) and dispatch in one transaction, and returns
// how many it took.
func dispatchBatch(ctx context.Context, pool *pgxpool.Pool, take string, batch int, dispatch DispatchFunc) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, take, pgx.QueryExecModeExec, batch)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		if err := dispatch(ctx, tx, ids); err != nil {
			return err
		}
		n = len(ids)
		return nil
	})
	return n, err
}

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

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
	// Traceparent is the W3C traceparent the accept stores with the intent's
	// row of the relay's queue ("" while tracing is off: NULL); not read back.
	Traceparent string
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

// PurgeFailedIntents deletes up to batch failed intents that failed more than
// retention ago by the database's clock, oldest first, skipping rows another
// sweeper holds, and returns how many it deleted. An intent stays while
// anything may still read it: its key record (until purged, or taken by a
// later request of the same key), its row of the relay's queue, or a pending
// webhook event (whose delivery renders the intent). Pending intents are
// never deleted, nor succeeded ones: a succeeded intent answers a late retry
// of its parcel (the natural key) and its label refers to it.
func PurgeFailedIntents(ctx context.Context, db DB, retention time.Duration, batch int) (int64, error) {
	return purgeOldest(ctx, db, "label_intents", `status = 'failed' AND completed_at < `+sqlAgo+`
		AND NOT EXISTS (SELECT 1 FROM idempotency_keys k
		                 WHERE k.caller_id = label_intents.caller_id AND k.idem_key = label_intents.idem_key
		                   AND k.request_id = label_intents.request_id)
		AND NOT EXISTS (SELECT 1 FROM label_intent_outbox o
		                 WHERE o.created_at = label_intents.created_at AND o.request_id = label_intents.request_id)
		AND NOT EXISTS (SELECT 1 FROM webhook_events e
		                 WHERE e.request_id = label_intents.request_id AND e.state = 'pending')`, "completed_at", retention, batch)
}

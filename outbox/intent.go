package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/idempotency"
)

// Intent is one row of label_intents.
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
	DispatchedAt       *time.Time
	CompletedAt        *time.Time
}

// Errors of the outbox.
var (
	ErrNotFound = errors.New("outbox: no such intent")
)

// Columns are the columns [ScanIntent] reads, in its order.
const Columns = `request_id, caller_id, idem_key, request_hash, fingerprint_version, payload,
	carrier_key, status, coalesce(label_id, ''), error::text, created_at, dispatched_at, completed_at`

// ScanIntent reads an intent from a row that starts with [Columns], and the
// row's further columns into extra.
func ScanIntent(row pgx.Row, extra ...any) (*Intent, error) {
	var in Intent
	var payload []byte
	var problem *string
	dest := append([]any{&in.RequestID, &in.CallerID, &in.Key, &in.RequestHash, &in.FingerprintVersion, &payload,
		&in.CarrierKey, &in.Status, &in.LabelID, &problem, &in.CreatedAt, &in.DispatchedAt, &in.CompletedAt}, extra...)
	err := row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(payload, &in.Parcel); err != nil {
		return nil, err
	}
	if problem != nil {
		in.Error = []byte(*problem)
	}
	return &in, nil
}

// QueueInsert queues, on a batch that runs inside the caller's transaction,
// the insert of a pending intent. The caller wakes the relays after its commit
// (see notify.Notifier): a NOTIFY inside the transaction would serialise commits. When the natural key is
// taken, nothing is inserted and *inserted stays false; the transaction stays
// usable, since the conflict is handled by ON CONFLICT, not by an error.
func QueueInsert(b *pgx.Batch, in *Intent, inserted *bool) error {
	payload, err := json.Marshal(in.Parcel)
	if err != nil {
		return err
	}
	b.Queue(`
		WITH ins AS (
			INSERT INTO label_intents
			       (request_id, caller_id, idem_key, request_hash, fingerprint_version,
			        order_id, parcel_no, label_version, payload, carrier_key, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
			ON CONFLICT (caller_id, order_id, parcel_no, label_version)
			   WHERE status IN ('pending', 'succeeded') DO NOTHING
			RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM ins)`,
		in.RequestID, in.CallerID, in.Key, in.RequestHash, in.FingerprintVersion,
		in.Parcel.OrderID, in.Parcel.ParcelNo, in.Parcel.LabelVersion, payload, in.CarrierKey, in.CreatedAt,
	).QueryRow(func(row pgx.Row) error {
		return row.Scan(inserted)
	})
	return nil
}

// Get reads an intent by request id, scoped to callerID unless it is empty.
func Get(ctx context.Context, db idempotency.DBTX, callerID, requestID string) (*Intent, error) {
	return ScanIntent(db.QueryRow(ctx, `SELECT `+Columns+` FROM label_intents
		WHERE request_id = $1 AND ($2 = '' OR caller_id = $2)`, requestID, callerID))
}

// GetByKey reads the caller's newest intent made under key.
func GetByKey(ctx context.Context, db idempotency.DBTX, callerID, key string) (*Intent, error) {
	return ScanIntent(db.QueryRow(ctx, `SELECT `+Columns+` FROM label_intents
		WHERE caller_id = $1 AND idem_key = $2 ORDER BY created_at DESC LIMIT 1`, callerID, key))
}

// GetByParcel reads the pending or succeeded intent of a parcel and version.
func GetByParcel(ctx context.Context, db idempotency.DBTX, callerID string, orderID int64, parcelNo, labelVersion int) (*Intent, error) {
	return ScanIntent(db.QueryRow(ctx, `SELECT `+Columns+` FROM label_intents
		WHERE caller_id = $1 AND order_id = $2 AND parcel_no = $3 AND label_version = $4
		  AND status IN ('pending', 'succeeded')`, callerID, orderID, parcelNo, labelVersion))
}

// MarkSucceeded makes a pending intent succeeded with its label. The caller
// wakes whoever waits for it after its commit (see notify.Notifier).
func MarkSucceeded(ctx context.Context, tx pgx.Tx, requestID, labelID string) error {
	return mark(ctx, tx, requestID, `status = 'succeeded', label_id = $2, completed_at = now()`, labelID)
}

// MarkFailed makes a pending intent failed for good with its saved problem.
func MarkFailed(ctx context.Context, tx pgx.Tx, requestID string, problem []byte) error {
	return mark(ctx, tx, requestID, `status = 'failed', error = $2::text::json, completed_at = now()`, string(problem))
}

func mark(ctx context.Context, tx pgx.Tx, requestID, set string, arg any) error {
	tag, err := tx.Exec(ctx, `UPDATE label_intents SET `+set+` WHERE request_id = $1 AND status = 'pending'`, requestID, arg)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// Package label owns the labels table: every label we bought, with the
// carrier's identifiers and the key that made it. A label is inserted in the
// completion transaction, together with the completed key record and the
// succeeded intent; the natural key (caller, order, parcel, version) is unique
// here too, the last line of defence against a second label for one parcel.
package label

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/idempotency"
)

// Record is a label with what the API does not show.
type Record struct {
	labels.Label
	CallerID     string
	RequestID    string
	CarrierKey   string
	CreatedByKey string
	PurchasedAt  *time.Time
}

// ErrParcelAlreadyLabelled is returned by [Insert] when the parcel and version
// already have a label. The transaction is aborted and must be rolled back.
var ErrParcelAlreadyLabelled = errors.New("label: parcel and version already have a label")

// ErrNotFound is returned when no label matches.
var ErrNotFound = errors.New("label: no such label")

// Insert stores a label.
func Insert(ctx context.Context, tx pgx.Tx, r *Record) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO labels (label_id, caller_id, request_id, order_id, parcel_no, label_version, service,
		                    tracking_no, carrier_label_id, carrier_key, cost_cents, currency,
		                    created_by_key, purchased_at, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
		r.LabelID, r.CallerID, r.RequestID, r.OrderID, r.ParcelNo, r.LabelVersion, r.Service,
		r.TrackingNo, r.CarrierLabelID, r.CarrierKey, r.CostCents, r.Currency,
		r.CreatedByKey, r.PurchasedAt, r.CreatedAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "labels_natural_key" {
		return ErrParcelAlreadyLabelled
	}
	return err
}

const columns = `label_id, caller_id, request_id, order_id, parcel_no, label_version, service, tracking_no,
	carrier_label_id, carrier_key, cost_cents, currency, created_by_key, purchased_at, created_at`

func scan(row pgx.Row) (*Record, error) {
	var r Record
	err := row.Scan(&r.LabelID, &r.CallerID, &r.RequestID, &r.OrderID, &r.ParcelNo, &r.LabelVersion, &r.Service,
		&r.TrackingNo, &r.CarrierLabelID, &r.CarrierKey, &r.CostCents, &r.Currency, &r.CreatedByKey, &r.PurchasedAt, &r.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	r.CreatedAt = r.CreatedAt.UTC()
	return &r, nil
}

// Get reads the caller's label by id.
func Get(ctx context.Context, db idempotency.DBTX, callerID, labelID string) (*Record, error) {
	return scan(db.QueryRow(ctx, `SELECT `+columns+` FROM labels WHERE label_id = $1 AND caller_id = $2`, labelID, callerID))
}

// GetByParcel reads the label of a parcel and version.
func GetByParcel(ctx context.Context, db idempotency.DBTX, callerID string, orderID int64, parcelNo, labelVersion int) (*Record, error) {
	return scan(db.QueryRow(ctx, `SELECT `+columns+` FROM labels
		WHERE caller_id = $1 AND order_id = $2 AND parcel_no = $3 AND label_version = $4`, callerID, orderID, parcelNo, labelVersion))
}

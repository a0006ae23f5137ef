package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/labelkit/labels"
)

// Label is one row of labels: a label we bought, with what the API does not
// show. The natural key (caller, order, parcel, version) is unique here too,
// the last line of defence against a second label for one parcel.
type Label struct {
	labels.Label
	CallerID     string
	RequestID    string
	CarrierKey   string
	CreatedByKey string
	PurchasedAt  *time.Time
}

const labelColumns = `label_id, caller_id, request_id, order_id, parcel_no, label_version, service, tracking_no,
	carrier_label_id, carrier_key, cost_cents, currency, created_by_key, purchased_at, created_at,
	document_url, document_content_type, document_size_bytes`

func getLabel(row pgx.Row) (*Label, error) {
	var r Label
	var docURL, docType *string
	var docSize *int64
	err := row.Scan(&r.LabelID, &r.CallerID, &r.RequestID, &r.OrderID, &r.ParcelNo, &r.LabelVersion, &r.Service,
		&r.TrackingNo, &r.CarrierLabelID, &r.CarrierKey, &r.CostCents, &r.Currency, &r.CreatedByKey, &r.PurchasedAt, &r.CreatedAt,
		&docURL, &docType, &docSize)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	r.CreatedAt = r.CreatedAt.UTC()
	if docURL != nil && docType != nil && docSize != nil {
		r.Document = &labels.Document{URL: *docURL, ContentType: *docType, SizeBytes: *docSize}
	}
	return &r, nil
}

// GetLabel reads the caller's label by id.
func GetLabel(ctx context.Context, db DB, callerID, labelID string) (*Label, error) {
	return getLabel(db.QueryRow(ctx, `SELECT `+labelColumns+` FROM labels WHERE label_id = $1 AND caller_id = $2`, labelID, callerID))
}

// GetLabelByParcel reads the label of a parcel and version.
func GetLabelByParcel(ctx context.Context, db DB, callerID string, orderID int64, parcelNo, labelVersion int) (*Label, error) {
	return getLabel(db.QueryRow(ctx, `SELECT `+labelColumns+` FROM labels
		WHERE caller_id = $1 AND order_id = $2 AND parcel_no = $3 AND label_version = $4`, callerID, orderID, parcelNo, labelVersion))
}

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

// PurgeLabels deletes up to batch labels created more than retention ago by
// the database's clock, each with its intent (in the same statement: labels
// refers to label_intents), oldest first, skipping rows another sweeper
// holds, and returns how many labels it deleted. A label stays while its key
// record lives (a repeat is answered from it) and while its webhook event is
// pending (the delivery renders the label). After the purge the parcel is
// unprotected: a retry of it buys a new label.
func PurgeLabels(ctx context.Context, db DB, retention time.Duration, batch int) (int64, error) {
	var n int64
	sql, args := PurgeSQL(ctx, `
		WITH gone AS (
			DELETE FROM labels
			 WHERE ctid IN (SELECT ctid FROM labels l
			                 WHERE created_at < `+sqlAgo+`
			                   AND NOT EXISTS (SELECT 1 FROM idempotency_keys k
			                                    WHERE k.caller_id = l.caller_id AND k.idem_key = l.created_by_key
			                                      AND k.request_id = l.request_id)
			                   AND NOT EXISTS (SELECT 1 FROM webhook_events e
			                                    WHERE e.request_id = l.request_id AND e.state = 'pending')
			                 ORDER BY created_at
			                 LIMIT $2
			                   FOR UPDATE SKIP LOCKED)
			RETURNING request_id),
		     intents AS (DELETE FROM label_intents i USING gone WHERE i.request_id = gone.request_id)
		SELECT count(*) FROM gone`, 3)
	err := db.QueryRow(ctx, sql, append([]any{retention.Seconds(), batch}, args...)...).Scan(&n)
	return n, err
}

package client

import (
	"encoding/json"
	"time"
)

// The API's wire types, as docs/api.md and api/openapi.yaml define them. They
// are the client's own, so that the SDK needs nothing but the standard
// library; a test of the service's repository (e2e/sdk) holds them to the
// JSON the service writes, field by field.

// Address is where a parcel goes.
type Address struct {
	Name       string `json:"name"`
	Line1      string `json:"line1"`
	Line2      string `json:"line2"`
	City       string `json:"city"`
	PostalCode string `json:"postal_code"`
	Country    string `json:"country"`
}

// Parcel is the body of POST /v1/labels: one parcel of an order, and the
// version of its label (1 for the first, n+1 for a reprint).
type Parcel struct {
	OrderID      int64   `json:"order_id"`
	ParcelNo     int     `json:"parcel_no"`
	WeightG      int     `json:"weight_g"`
	Service      string  `json:"service"`
	LabelVersion int     `json:"label_version"`
	ShipTo       Address `json:"ship_to"`
}

// Label is a label the service bought.
type Label struct {
	LabelID        string `json:"label_id"`
	OrderID        int64  `json:"order_id"`
	ParcelNo       int    `json:"parcel_no"`
	LabelVersion   int    `json:"label_version"`
	Service        string `json:"service"`
	TrackingNo     string `json:"tracking_no"`
	CarrierLabelID string `json:"carrier_label_id"`
	// CostCents and Currency are what the carrier charged for the label, in
	// the currency it billed in.
	CostCents int64     `json:"cost_cents"`
	Currency  string    `json:"currency"`
	CreatedAt time.Time `json:"created_at"`
	// Document is the printable label the carrier named, nil when it named
	// none. [Client.LabelDocument] fetches it through the API.
	Document *Document `json:"document,omitempty"`
}

// Document describes the printable label (a PDF or ZPL file) at the
// carrier: its URL there (which needs the carrier's credentials), its media
// type and its size.
type Document struct {
	URL         string `json:"url"`
	ContentType string `json:"content_type"`
	SizeBytes   int64  `json:"size_bytes"`
}

// Statuses of a [LabelRequest].
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// LabelRequest tracks one accepted request: pending, or final with its label
// (Status succeeded, Label a [Label]'s JSON) or its saved problem (Status
// failed, Error a [Problem]'s JSON).
type LabelRequest struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotency_key"`
	Status         string          `json:"status"`
	CreatedAt      time.Time       `json:"created_at"`
	CompletedAt    *time.Time      `json:"completed_at"`
	Label          json.RawMessage `json:"label"`
	Error          json.RawMessage `json:"error"`
}

// Problem codes: the stable, machine-readable names of the API's problems.
const (
	CodeIdempotencyKeyMissing = "idempotency_key_missing"
	CodeIdempotencyKeyInvalid = "idempotency_key_invalid"
	CodeIdempotencyKeyReused  = "idempotency_key_reused"
	CodeInvalidRequest        = "invalid_request"
	CodePayloadTooLarge       = "payload_too_large"
	CodeUnauthenticated       = "unauthenticated"
	CodeNotFound              = "not_found"
	CodeRequestInProgress     = "request_in_progress"
	CodeParcelAlreadyLabelled = "parcel_already_labelled"
	CodeStoreUnavailable      = "store_unavailable"
	CodeCarrierRejected       = "carrier_rejected"
	CodeCarrierUnavailable    = "carrier_unavailable"
	CodeMethodNotAllowed      = "method_not_allowed"
	CodeUnsupportedMediaType  = "unsupported_media_type"
	CodeRateLimited           = "rate_limited"
	CodeInternal              = "internal"
)

// FieldError names one invalid field of a request.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Problem is an RFC 9457 problem document, the body of every error answer.
type Problem struct {
	Type           string       `json:"type"`
	Title          string       `json:"title"`
	Status         int          `json:"status"`
	Code           string       `json:"code"`
	Detail         string       `json:"detail,omitempty"`
	Errors         []FieldError `json:"errors,omitempty"`
	CarrierCode    string       `json:"carrier_code,omitempty"`
	CarrierMessage string       `json:"carrier_message,omitempty"`
}

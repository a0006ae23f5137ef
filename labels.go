// Package labels holds the domain of the label service: the parcel a caller
// asks a label for, the label bought for it, the label request that tracks the
// asynchronous purchase, and the error codes every layer speaks.
//
// The pipeline, in the order data flows (see README.md):
//
//	httpapi      parses, authenticates, maps decisions and errors to HTTP
//	accept       fingerprints and accepts: key record + outbox intent, one transaction
//	postgres     owns the pipeline's tables: every statement on them
//	outbox       the relay turns accepted intents into River jobs
//	jobs         the worker leases the key, calls the carrier, completes (label + key, one transaction)
//	worker       wires River, the relay, the sweeper and the buy-label worker
//	carrier      the client and the simulator
//	reconcile    the nightly match of the carrier's invoice against our labels
package labels

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/labelkit/labels/idempotency"
)

// Services a label can be bought for.
var Services = []string{"ground", "express", "overnight"}

// Address is where a parcel goes. It is personal data: it is sent to the
// carrier and kept in the intent's payload, but never logged and never put in a key.
type Address struct {
	Name       string `json:"name"`
	Line1      string `json:"line1"`
	Line2      string `json:"line2"`
	City       string `json:"city"`
	PostalCode string `json:"postal_code"`
	Country    string `json:"country"`
}

// Parcel is a validated POST /v1/labels body, with defaults applied.
type Parcel struct {
	OrderID      int64   `json:"order_id"`
	ParcelNo     int     `json:"parcel_no"`
	WeightG      int     `json:"weight_g"`
	Service      string  `json:"service"`
	LabelVersion int     `json:"label_version"`
	ShipTo       Address `json:"ship_to"`
}

// AppendCanonical implements [idempotency.Appender]: the parcel's canonical
// JSON, members in name order, written without the round trip through
// encoding/json that the fingerprint of every create would otherwise pay.
// FuzzParcelCanonical holds it to the general way's bytes.
func (p Parcel) AppendCanonical(b []byte) ([]byte, bool) {
	ok := true
	str := func(name, v string) {
		b = append(b, name...)
		if ok {
			b, ok = idempotency.AppendString(b, v)
		}
	}
	b = append(b, `{"label_version":`...)
	b = strconv.AppendInt(b, int64(p.LabelVersion), 10)
	b = append(b, `,"order_id":`...)
	b = strconv.AppendInt(b, p.OrderID, 10)
	b = append(b, `,"parcel_no":`...)
	b = strconv.AppendInt(b, int64(p.ParcelNo), 10)
	str(`,"service":`, p.Service)
	a := p.ShipTo
	str(`,"ship_to":{"city":`, a.City)
	str(`,"country":`, a.Country)
	str(`,"line1":`, a.Line1)
	str(`,"line2":`, a.Line2)
	str(`,"name":`, a.Name)
	str(`,"postal_code":`, a.PostalCode)
	b = append(b, `},"weight_g":`...)
	b = strconv.AppendInt(b, int64(p.WeightG), 10)
	return append(b, '}'), ok
}

// Label is a label we bought, as api.md shapes it.
type Label struct {
	LabelID        string `json:"label_id"`
	OrderID        int64  `json:"order_id"`
	ParcelNo       int    `json:"parcel_no"`
	LabelVersion   int    `json:"label_version"`
	Service        string `json:"service"`
	TrackingNo     string `json:"tracking_no"`
	CarrierLabelID string `json:"carrier_label_id"`
	// CostCents and Currency are what the carrier charged for the label, in
	// the currency it billed in: no conversion is made.
	CostCents int64     `json:"cost_cents"`
	Currency  string    `json:"currency"`
	CreatedAt time.Time `json:"created_at"`
	// Document is the printable label the carrier named, nil when it named
	// none. Left out of the JSON when nil, so that a label without one renders
	// to the bytes it always did.
	Document *Document `json:"document,omitempty"`
}

// Document is the printable label (a PDF or ZPL file) at the carrier: where to
// fetch it (with the carrier's credentials), its media type and its size.
type Document struct {
	URL         string `json:"url"`
	ContentType string `json:"content_type"`
	SizeBytes   int64  `json:"size_bytes"`
}

// Body renders the label as the JSON saved at completion and replayed after.
// It is deterministic: the same label always renders to the same bytes, which
// is what lets a replay through the natural key (after the key record was
// purged) match the body saved under the key.
func (l Label) Body() []byte {
	l.CreatedAt = l.CreatedAt.UTC().Truncate(time.Microsecond)
	b, err := json.Marshal(l)
	if err != nil {
		panic(err) // a struct of strings, ints and a time cannot fail
	}
	return b
}

// Request statuses of a LabelRequest.
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// LabelRequest tracks one accepted intent, as api.md shapes it.
type LabelRequest struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotency_key"`
	Status         string          `json:"status"`
	CreatedAt      time.Time       `json:"created_at"`
	CompletedAt    *time.Time      `json:"completed_at"`
	Label          json.RawMessage `json:"label"`
	Error          json.RawMessage `json:"error"`
}

// Error codes: the stable, machine-readable names of problems (api.md).
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

// CarrierCodeLabelVoided is the carrier_code of a saved carrier_rejected
// problem when the carrier answered the purchase with a label it has voided
// since it sold it (a void that reached it while the request retried): the
// service never hands out a voided label, and the request's key only ever
// names that label, so a new label needs a new key.
const CarrierCodeLabelVoided = "label_voided"

// FieldError names one invalid field of a request.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Problem is an RFC 9457 problem document. Saved failures (carrier_rejected,
// carrier_unavailable) are stored in this shape and replayed as they are.
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

// ProblemTypeBase prefixes every problem type URI.
const ProblemTypeBase = "https://labelkit.dev/problems/"

// NewProblem returns a problem of code, its status, type and title filled in
// from the table of codes.
func NewProblem(code, detail string) *Problem {
	c := codes[code]
	return &Problem{Type: ProblemTypeBase + code, Title: c.title, Status: c.status, Code: code, Detail: detail}
}

// StatusOf is the HTTP status of a problem code (500 for a code not in the table).
func StatusOf(code string) int {
	if c, ok := codes[code]; ok {
		return c.status
	}
	return 500
}

// Body renders the problem as JSON.
func (p *Problem) Body() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return b
}

// Error makes a problem usable as an error.
func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// codes is the one table of problem codes: each code's HTTP status and title.
var codes = map[string]struct {
	status int
	title  string
}{
	CodeIdempotencyKeyMissing: {400, "Idempotency-Key header missing"},
	CodeIdempotencyKeyInvalid: {400, "Idempotency-Key header invalid"},
	CodeIdempotencyKeyReused:  {422, "Idempotency key reused with a different request"},
	CodeInvalidRequest:        {400, "Invalid request"},
	CodePayloadTooLarge:       {413, "Payload too large"},
	CodeUnauthenticated:       {401, "Unauthenticated"},
	CodeNotFound:              {404, "Not found"},
	CodeRequestInProgress:     {409, "Request in progress"},
	CodeParcelAlreadyLabelled: {409, "Parcel already labelled"},
	CodeStoreUnavailable:      {503, "Store unavailable"},
	CodeCarrierRejected:       {422, "Rejected by the carrier"},
	CodeCarrierUnavailable:    {502, "Carrier unavailable"},
	CodeMethodNotAllowed:      {405, "Method not allowed"},
	CodeUnsupportedMediaType:  {415, "Unsupported media type"},
	CodeRateLimited:           {429, "Rate limited"},
	CodeInternal:              {500, "Internal error"},
}

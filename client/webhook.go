package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Event is a completion webhook's body: a label request became final
// (docs/api.md, "Webhooks").
type Event struct {
	// ID is the webhook-id header: the same on every retry of the event, so
	// a receiver that saw it before can skip it.
	ID string `json:"-"`
	// Type is EventSucceeded or EventFailed.
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	// Data is the label request, as GET /v1/label-requests/{id} returns it.
	Data LabelRequest `json:"data"`
}

// Event types.
const (
	EventSucceeded = "label_request.succeeded"
	EventFailed    = "label_request.failed"
)

// WebhookTolerance is how far a delivery's webhook-timestamp may be from now
// (Standard Webhooks' replay window).
const WebhookTolerance = 5 * time.Minute

// ErrWebhookSignature is returned by [VerifyWebhook] for a delivery that is
// not signed by the secret, or is signed too far from now.
var ErrWebhookSignature = errors.New("client: webhook signature does not verify")

// VerifyWebhook checks a delivery as Standard Webhooks 1.0 signs it and
// returns its event: header is the request's headers (webhook-id,
// webhook-timestamp, webhook-signature), body the raw body as received
// (verify before parsing; a re-encoded body does not verify), secret the
// whsec_ secret printed by `api webhook set` or `api webhook rotate`. It
// refuses a timestamp more than [WebhookTolerance] from now. During a
// rotation a delivery carries one signature per live secret; it verifies
// when any of them is the secret's.
func VerifyWebhook(secret string, header http.Header, body []byte, now time.Time) (Event, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return Event{}, fmt.Errorf("client: the webhook secret is not whsec_ followed by base64")
	}
	id, ts, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return Event{}, fmt.Errorf("%w: webhook-id, webhook-timestamp or webhook-signature missing", ErrWebhookSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Event{}, fmt.Errorf("%w: webhook-timestamp %q is not Unix seconds", ErrWebhookSignature, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > WebhookTolerance || d < -WebhookTolerance {
		return Event{}, fmt.Errorf("%w: webhook-timestamp is %s from now", ErrWebhookSignature, d.Round(time.Second))
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	want := m.Sum(nil)
	ok := false
	for _, s := range strings.Fields(sigs) {
		version, sig, found := strings.Cut(s, ",")
		if !found || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			ok = true
			break
		}
	}
	if !ok {
		return Event{}, ErrWebhookSignature
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return Event{}, fmt.Errorf("client: webhook body: %w", err)
	}
	ev.ID = id
	return ev, nil
}

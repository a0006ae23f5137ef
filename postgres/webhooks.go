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

// ErrUnknownCaller is returned for a caller that does not exist.
var ErrUnknownCaller = errors.New("no such caller")

// ErrNoWebhook is returned for a caller without a webhook endpoint.
var ErrNoWebhook = errors.New("the caller has no webhook endpoint")

// Webhook endpoint states.
const (
	WebhookActive   = "active"
	WebhookDisabled = "disabled"
)

// Webhook is one caller's endpoint.
type Webhook struct {
	CallerID       string
	URL            string
	State          string // WebhookActive or WebhookDisabled
	FailuresInRow  int
	DisabledReason string
	// LastError is, for a disabled endpoint, the error of the last attempt
	// of its latest event that failed (what the receiver or the worker's
	// checks answered); empty otherwise.
	LastError string
}

// Secret is a signing secret as stored: its raw bytes, or those bytes sealed
// (encrypted by package webhook).
type Secret struct {
	Value  []byte
	Sealed bool
}

// SetWebhook sets (or replaces) callerID's endpoint, active with no failures
// in a row. When the caller has no live secret, secret becomes its secret
// and created is true; otherwise secret is not stored.
func SetWebhook(ctx context.Context, pool *pgxpool.Pool, callerID, url string, secret Secret) (created bool, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var known bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM callers WHERE caller_id = $1)`, callerID).Scan(&known); err != nil {
			return err
		}
		if !known {
			return ErrUnknownCaller
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO webhook_endpoints (caller_id, url) VALUES ($1, $2)
			ON CONFLICT (caller_id) DO UPDATE
			   SET url = EXCLUDED.url, state = 'active', failures_in_row = 0, disabled_reason = NULL, updated_at = now()`,
			callerID, url)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO webhook_secrets (caller_id, secret, sealed)
			SELECT $1, $2, $3 WHERE NOT EXISTS (SELECT 1 FROM webhook_secrets
			                                     WHERE caller_id = $1 AND (expires_at IS NULL OR expires_at > now()))`,
			callerID, secret.Value, secret.Sealed)
		created = tag.RowsAffected() == 1
		return err
	})
	return created, err
}

// RotateWebhookSecret adds secret as callerID's newest secret; the secrets
// live until now keep signing for overlap, and those already expired are
// removed.
func RotateWebhookSecret(ctx context.Context, pool *pgxpool.Pool, callerID string, secret Secret, overlap time.Duration) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_endpoints WHERE caller_id = $1 FOR UPDATE)`, callerID).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return ErrNoWebhook
		}
		_, err := tx.Exec(ctx, `
			WITH gone AS (DELETE FROM webhook_secrets WHERE caller_id = $1 AND expires_at <= now()),
			     old AS (UPDATE webhook_secrets SET expires_at = least(coalesce(expires_at, 'infinity'), now() + make_interval(secs => $3))
			              WHERE caller_id = $1 AND (expires_at IS NULL OR expires_at > now()))
			INSERT INTO webhook_secrets (caller_id, secret, sealed) VALUES ($1, $2, $4)`, callerID, secret.Value, overlap.Seconds(), secret.Sealed)
		return err
	})
}

// DeleteWebhook removes callerID's endpoint and its secrets, and drops its
// undelivered events; it returns how many it dropped.
func DeleteWebhook(ctx context.Context, pool *pgxpool.Pool, callerID string) (dropped int, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM webhook_endpoints WHERE caller_id = $1`, callerID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNoWebhook
		}
		tag, err = tx.Exec(ctx, `
			UPDATE webhook_events SET state = 'dropped', drop_reason = 'endpoint_deleted', finished_at = now()
			 WHERE caller_id = $1 AND state = 'pending'`, callerID)
		dropped = int(tag.RowsAffected())
		return err
	})
	return dropped, err
}

// ListWebhooks returns every endpoint, by caller.
func ListWebhooks(ctx context.Context, db DB) ([]Webhook, error) {
	// The last error is read only for the disabled endpoints (few), whose
	// events have no index by caller once finished.
	rows, err := db.Query(ctx, `SELECT w.caller_id, w.url, w.state, w.failures_in_row, coalesce(w.disabled_reason, ''),
		       CASE WHEN w.state = 'disabled' THEN coalesce((SELECT e.last_error FROM webhook_events e
		            WHERE e.caller_id = w.caller_id AND e.last_error IS NOT NULL
		            ORDER BY e.finished_at DESC NULLS LAST, e.created_at DESC LIMIT 1), '') ELSE '' END
		FROM webhook_endpoints w ORDER BY w.caller_id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Webhook, error) {
		var w Webhook
		err := r.Scan(&w.CallerID, &w.URL, &w.State, &w.FailuresInRow, &w.DisabledReason, &w.LastError)
		return w, err
	})
}

// WebhookEvent is one event as an attempt to deliver it sees it.
type WebhookEvent struct {
	RequestID string
	EventID   string // the webhook-id
	CallerID  string
	Type      string
	CreatedAt time.Time
	Attempt   int // this attempt's number, from 1
	URL       string
	Secrets   []Secret // the live secrets, newest first
	// Traceparent is the traceparent of the purchase's job that the
	// completion stored with the event ("" when it ran untraced).
	Traceparent string
}

// AttemptResult says whether an attempt may deliver.
type AttemptResult int

const (
	// AttemptGo: the attempt is counted; deliver.
	AttemptGo AttemptResult = iota + 1
	// AttemptFinal: the event is already delivered or dropped.
	AttemptFinal
	// AttemptDropped: the endpoint is disabled or deleted; the event is
	// dropped (now, or by the delete), for the reason returned.
	AttemptDropped
	// AttemptGone: there is no such event.
	AttemptGone
	// AttemptHeld: admit refused the attempt (its endpoint has enough in
	// flight); nothing is written, the attempt is not counted.
	AttemptHeld
)

// StartWebhookAttempt counts one attempt of the event of requestID, committed
// before the delivery (an attempt that dies mid-delivery is counted), and
// returns the event with its endpoint and live secrets. An event whose
// endpoint was deleted or disabled is dropped instead. admit, when not nil,
// is asked, with the event's caller, before the attempt is counted; false
// returns AttemptHeld with nothing written; after a true, the caller
// gives back what admit took, whatever is returned.
func StartWebhookAttempt(ctx context.Context, pool *pgxpool.Pool, requestID string, admit func(callerID string) bool) (*WebhookEvent, AttemptResult, string, error) {
	var ev WebhookEvent
	res, reason := AttemptGo, ""
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var state, dropReason string
		var url, epState *string
		err := tx.QueryRow(ctx, `
			SELECT e.request_id, e.event_id, e.caller_id, e.type, e.created_at, e.state, coalesce(e.drop_reason, ''), e.attempts, p.url, p.state,
			       coalesce(e.traceparent, '')
			  FROM webhook_events e LEFT JOIN webhook_endpoints p ON p.caller_id = e.caller_id
			 WHERE e.request_id = $1
			   FOR UPDATE OF e`, requestID).
			Scan(&ev.RequestID, &ev.EventID, &ev.CallerID, &ev.Type, &ev.CreatedAt, &state, &dropReason, &ev.Attempt, &url, &epState, &ev.Traceparent)
		if errors.Is(err, pgx.ErrNoRows) {
			res = AttemptGone
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case state == "dropped" && dropReason == "endpoint_deleted":
			// Dropped by `api webhook delete`: its job reports the drop.
			res, reason = AttemptDropped, dropReason
			return nil
		case state != "pending":
			res = AttemptFinal
			return nil
		case url == nil:
			res, reason = AttemptDropped, "endpoint_deleted"
		case *epState != WebhookActive:
			res, reason = AttemptDropped, "endpoint_disabled"
		}
		if res == AttemptDropped {
			_, err := tx.Exec(ctx, `UPDATE webhook_events SET state = 'dropped', drop_reason = $2, finished_at = now()
				WHERE request_id = $1`, requestID, reason)
			return err
		}
		if admit != nil && !admit(ev.CallerID) {
			res = AttemptHeld
			return nil
		}
		ev.URL = *url
		ev.Attempt++
		if _, err := tx.Exec(ctx, `UPDATE webhook_events SET attempts = $2 WHERE request_id = $1`, requestID, ev.Attempt); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT secret, sealed FROM webhook_secrets
			WHERE caller_id = $1 AND (expires_at IS NULL OR expires_at > now()) ORDER BY secret_id DESC`, ev.CallerID)
		if err != nil {
			return err
		}
		ev.Secrets, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Secret, error) {
			var sec Secret
			err := r.Scan(&sec.Value, &sec.Sealed)
			return sec, err
		})
		return err
	})
	if err != nil {
		return nil, 0, "", err
	}
	return &ev, res, reason, nil
}

// AttemptOutcome is what one delivery attempt ended with.
type AttemptOutcome struct {
	Status int    // the receiver's HTTP status; 0 when none came
	Error  string // why the attempt failed, when it did
	// Delivered: a 2xx. Gone: a 410, which disables the endpoint.
	// Exhausted: the last attempt failed; the event is dropped.
	Delivered, Gone, Exhausted bool
}

// ErrEventDropped is returned by [FinishWebhookAttempt] for an event that
// was dropped while the attempt ran (`api webhook delete`).
var ErrEventDropped = errors.New("the webhook event was dropped meanwhile")

// FinishWebhookAttempt records an attempt's outcome on a pending event. A
// delivery resets its endpoint's failures in a row; a 410 drops the event
// and disables the endpoint; the last failed attempt drops the event and
// counts a failure in a row, disabling the endpoint at disableAfter. It
// returns whether this outcome disabled the endpoint, and ErrEventDropped,
// with nothing written, when the event is no longer pending.
func FinishWebhookAttempt(ctx context.Context, pool *pgxpool.Pool, ev *WebhookEvent, o AttemptOutcome, disableAfter int) (disabled bool, err error) {
	status := &o.Status
	if o.Status == 0 {
		status = nil
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var state, reason string
		switch {
		case o.Delivered:
			state = "delivered"
		case o.Gone:
			state, reason = "dropped", "gone"
		case o.Exhausted:
			state, reason = "dropped", "attempts_exhausted"
		default:
			state = "pending"
		}
		tag, err := tx.Exec(ctx, `
			UPDATE webhook_events
			   SET state = $2, drop_reason = nullif($3, ''), last_status = $4, last_error = nullif($5, ''),
			       finished_at = CASE WHEN $2 <> 'pending' THEN now() END
			 WHERE request_id = $1 AND state = 'pending'`, ev.RequestID, state, reason, status, o.Error)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrEventDropped
		}
		switch {
		case o.Delivered:
			_, err = tx.Exec(ctx, `UPDATE webhook_endpoints SET failures_in_row = 0 WHERE caller_id = $1 AND failures_in_row <> 0`, ev.CallerID)
		case o.Gone:
			tag, err = tx.Exec(ctx, `UPDATE webhook_endpoints SET state = 'disabled', disabled_reason = '410 Gone', updated_at = now()
				WHERE caller_id = $1 AND state = 'active'`, ev.CallerID)
			disabled = err == nil && tag.RowsAffected() == 1
		case o.Exhausted:
			err = tx.QueryRow(ctx, `
				WITH old AS (SELECT state FROM webhook_endpoints WHERE caller_id = $1 FOR UPDATE)
				UPDATE webhook_endpoints p
				   SET failures_in_row = p.failures_in_row + 1,
				       state = CASE WHEN p.failures_in_row + 1 >= $2 THEN 'disabled' ELSE p.state END,
				       disabled_reason = CASE WHEN p.failures_in_row + 1 >= $2 AND p.state = 'active'
				                              THEN (p.failures_in_row + 1) || ' events in a row failed' ELSE p.disabled_reason END,
				       updated_at = now()
				  FROM old
				 WHERE p.caller_id = $1
				RETURNING old.state = 'active' AND p.state = 'disabled'`, ev.CallerID, disableAfter).Scan(&disabled)
			if errors.Is(err, pgx.ErrNoRows) {
				err = nil
			}
		}
		return err
	})
	return disabled, err
}

// PurgeWebhookEvents deletes up to batch events delivered or dropped more
// than retention ago by the database's clock and returns how many it deleted.
// Pending events are never purged.
func PurgeWebhookEvents(ctx context.Context, db DB, retention time.Duration, batch int) (int64, error) {
	return purgeOldest(ctx, db, "webhook_events", "state <> 'pending' AND finished_at < "+sqlAgo, "finished_at", retention, batch)
}

// WebhookStats are the gauges of the webhook metrics.
type WebhookStats struct {
	OldestUndelivered time.Duration // age of the oldest pending event; 0 when none
	Disabled          int           // disabled endpoints
}

// GetWebhookStats reads the webhook gauges.
func GetWebhookStats(ctx context.Context, db DB) (WebhookStats, error) {
	var s WebhookStats
	var secs float64
	err := db.QueryRow(ctx, `
		SELECT coalesce((SELECT extract(epoch FROM now() - min(created_at)) FROM webhook_events WHERE state = 'pending'), 0)::float8,
		       (SELECT count(*) FROM webhook_endpoints WHERE state = 'disabled')`).Scan(&secs, &s.Disabled)
	s.OldestUndelivered = time.Duration(secs * float64(time.Second))
	return s, err
}

// LabelRequestOf renders an intent as GET /v1/label-requests/{id} returns
// it; webhook events carry the same document.
func LabelRequestOf(ctx context.Context, db DB, in *Intent) (*labels.LabelRequest, error) {
	lr := &labels.LabelRequest{ID: in.RequestID, IdempotencyKey: in.Key, Status: in.Status, CreatedAt: in.CreatedAt.UTC()}
	if in.CompletedAt != nil {
		t := in.CompletedAt.UTC()
		lr.CompletedAt = &t
	}
	switch in.Status {
	case labels.StatusSucceeded:
		l, err := GetLabel(ctx, db, in.CallerID, in.LabelID)
		if err != nil {
			return nil, err
		}
		lr.Label = l.Label.Body()
	case labels.StatusFailed:
		lr.Error = json.RawMessage(in.Error)
	}
	return lr, nil
}

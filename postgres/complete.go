package postgres

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labelkit/labels/notify"
)

// Completion is one attempt's final outcome: the response saved under the
// key, and the label (on success) or the problem the intent failed with.
type Completion struct {
	RequestID string
	CallerID  string
	Key       string
	Token     uuid.UUID // the attempt's lease
	Status    int       // the saved response's status: 201, or the problem's
	// Body is the saved response of a problem. A label's is rendered by
	// [Complete] (labels.Label.Body), with created_at the transaction's
	// time: Label.CreatedAt is not sent.
	Body  []byte
	Label *Label // nil for a problem
	// Traceparent is stored with the webhook event, if one is written, for
	// its delivery to link to ("" while tracing is off: NULL).
	Traceparent string
}

// CompleteResult is what [Complete] did with one completion.
type CompleteResult int

const (
	// Completed: the key, the intent and the label (if any) are saved.
	Completed CompleteResult = iota + 1
	// CompleteFenced: the lease is no longer the attempt's (another attempt
	// took over, or the key is completed): nothing was written.
	CompleteFenced
	// CompleteParcelLabelled: the parcel and version already have a label:
	// nothing was written.
	CompleteParcelLabelled
	// CompleteBusy: another session holds the key's or the intent's row
	// right now; nothing was written, and the completion may be tried again.
	CompleteBusy
)

// sqlComplete saves the outcomes whose key is still started and leased with
// the attempt's token and whose intent is still pending (both locked first,
// in request id order, rows another session holds skipped), and returns an
// outcome per row. A label that would break a unique constraint is not
// inserted, and then nothing else of its row is written either.
// A row saved for a caller with a webhook endpoint also writes its webhook
// event (the outbox of deliveries), in the same statement: a completion
// without its event, or an event without its completion, cannot commit, and
// only the row that makes the intent final writes one.
// The same transaction notifies the request ids it made final on
// ChannelFinal (Prefer: wait), joined by commas, 100 to a notification,
// and, only when it wrote a webhook event, ChannelWebhookEvents (the relay of
// webhook events): PostgreSQL sends them at the commit, and no transaction of
// its own is needed for them.
// Every time it writes is the transaction's now(): the label's created_at
// (in its row and in the saved body, where it takes the place of the zero
// time the body was rendered with), the key's expires_at, the intent's
// completed_at and the event's created_at.
var sqlComplete = `
WITH inp AS (
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::int[], $6::text[],
                            $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[],
                            $13::bigint[], $14::bigint[], $15::int[], $16::int[], $17::timestamptz[],
                            $19::text[], $20::text[], $21::bigint[], $22::text[])
         AS t(request_id, caller_id, idem_key, token, status, body,
              label_id, service, tracking_no, carrier_label_id, carrier_key, currency,
              order_id, cost_cents, parcel_no, label_version, purchased_at,
              document_url, document_content_type, document_size_bytes, traceparent)),
     ok AS MATERIALIZED (
       SELECT inp.*
         FROM inp
         JOIN idempotency_keys k ON k.caller_id = inp.caller_id AND k.idem_key = inp.idem_key
         JOIN label_intents i ON i.request_id = inp.request_id
        WHERE k.state = 'started' AND k.lease_token = inp.token
          AND (i.status || '') = 'pending' -- as in sqlLease
        ORDER BY inp.request_id -- the lease's order
          FOR UPDATE OF k, i SKIP LOCKED),
     lab AS (
       INSERT INTO labels (label_id, caller_id, request_id, order_id, parcel_no, label_version, service,
                           tracking_no, carrier_label_id, carrier_key, cost_cents, currency,
                           created_by_key, purchased_at, created_at,
                           document_url, document_content_type, document_size_bytes)
       SELECT label_id, caller_id, request_id, order_id, parcel_no, label_version, service,
              tracking_no, carrier_label_id, carrier_key, cost_cents, currency,
              idem_key, purchased_at, now(),
              document_url, document_content_type, document_size_bytes
         FROM ok WHERE label_id IS NOT NULL
       ON CONFLICT DO NOTHING
       RETURNING request_id),
     good AS MATERIALIZED (
       SELECT * FROM ok WHERE label_id IS NULL OR request_id IN (SELECT request_id FROM lab)),
     keys AS (
       UPDATE idempotency_keys k
          SET state = 'completed', locked_until = NULL, lease_token = NULL, attempts = NULL,
              response_status = g.status,
              response_body = (CASE WHEN g.label_id IS NULL THEN g.body
                                    ELSE replace(g.body, '` + labelCreatedAtZero + `', '"created_at":"' || ` + sqlNowRFC3339 + ` || '"') END)::json,
              expires_at = now() + make_interval(secs => $18)
         FROM good g
        WHERE k.caller_id = g.caller_id AND k.idem_key = g.idem_key
       RETURNING g.request_id),
     intents AS (
       UPDATE label_intents i
          SET status = CASE WHEN g.label_id IS NULL THEN 'failed' ELSE 'succeeded' END,
              label_id = g.label_id,
              error = CASE WHEN g.label_id IS NULL THEN g.body::json END,
              completed_at = now()
         FROM good g
        WHERE i.request_id = g.request_id
       RETURNING i.request_id),
     events AS (
       INSERT INTO webhook_events (request_id, caller_id, type, created_at, traceparent)
       SELECT g.request_id, g.caller_id,
              CASE WHEN g.label_id IS NULL THEN 'label_request.failed' ELSE 'label_request.succeeded' END, now(),
              g.traceparent
         FROM good g
        WHERE EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.caller_id = g.caller_id)
       ON CONFLICT DO NOTHING
       RETURNING 1),
     notified AS MATERIALIZED (
       SELECT count(pg_notify('` + notify.ChannelFinal + `', ids)) AS n
         FROM (SELECT string_agg(request_id, ',') AS ids
                 FROM (SELECT request_id, (row_number() OVER ()) / 100 AS part FROM intents) p
                GROUP BY part) c),
     evented AS MATERIALIZED (
       SELECT count(pg_notify('` + notify.ChannelWebhookEvents + `', '')) AS n
         FROM (SELECT 1 FROM events LIMIT 1) e)
SELECT inp.request_id,
       CASE WHEN inp.request_id IN (SELECT request_id FROM keys INTERSECT SELECT request_id FROM intents) THEN ` + sqlOutcome(Completed) + `
            WHEN inp.request_id IN (SELECT request_id FROM ok) THEN ` + sqlOutcome(CompleteParcelLabelled) + `
            WHEN EXISTS (SELECT 1 FROM idempotency_keys k
                          WHERE k.caller_id = inp.caller_id AND k.idem_key = inp.idem_key
                            AND k.state = 'started' AND k.lease_token = inp.token) THEN ` + sqlOutcome(CompleteBusy) + `
            ELSE ` + sqlOutcome(CompleteFenced) + ` END
  FROM inp, notified, evented`

// labelCreatedAtZero is the created_at member of a label rendered with the
// zero time, which sqlComplete replaces with the transaction's time. A JSON
// string escapes its quotes, so this can only be the member itself.
const labelCreatedAtZero = `"created_at":"0001-01-01T00:00:00Z"`

// sqlNowRFC3339 renders now() as Go renders a time.Time in JSON (RFC 3339
// in UTC, the fraction of a second without trailing zeros): the same bytes
// as labels.Label.Body of the time read back from the row.
const sqlNowRFC3339 = `(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS') || ` +
	`rtrim(rtrim(to_char(now() AT TIME ZONE 'UTC', '.US'), '0'), '.') || 'Z')`

// Complete saves the completions, one statement in a transaction of its
// own, keys kept for retention from the transaction's now(), and returns an
// outcome per completion, in order. The fenced update is the whole guard: an attempt
// whose lease was taken over writes nothing. Of two completions of one
// intent, at most the first is saved.
func Complete(ctx context.Context, pool *pgxpool.Pool, cs []Completion, retention time.Duration) ([]CompleteResult, error) {
	args, at, outs, err := completeArgs(cs, retention)
	if err != nil {
		return nil, err
	}
	err = sendShared(ctx, pool, workerLockTimeout, func(b *pgx.Batch) {
		b.Queue(sqlComplete, args...).Query(func(rs pgx.Rows) error {
			var id string
			var r CompleteResult
			_, err := pgx.ForEachRow(rs, []any{&id, &r}, func() error {
				outs[at[id]] = r
				return nil
			})
			return err
		})
	}, nil)
	if err != nil {
		return nil, err
	}
	return outs, nil
}

// completeArgs are sqlComplete's arguments for cs, each request id's index in
// cs, and the outcomes known before the statement (a twin of a row is busy).
func completeArgs(cs []Completion, retention time.Duration) ([]any, map[string]int, []CompleteResult, error) {
	n := len(cs)
	var (
		ids, callers, keys, bodies                      = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		tokens                                          = make([]pgtype.UUID, 0, n)
		statuses, parcelNos, versions                   = make([]int, 0, n), make([]*int, 0, n), make([]*int, 0, n)
		labelIDs, services, trackings, cls, ckeys, curs = make([]*string, 0, n), make([]*string, 0, n), make([]*string, 0, n), make([]*string, 0, n), make([]*string, 0, n), make([]*string, 0, n)
		orderIDs, costs                                 = make([]*int64, 0, n), make([]*int64, 0, n)
		purchased                                       = make([]*time.Time, 0, n)
		docURLs, docTypes, docSizes                     = make([]*string, 0, n), make([]*string, 0, n), make([]*int64, 0, n)
		traceparents                                    = make([]*string, 0, n) // nil: NULL
		at                                              = make(map[string]int, n)
	)
	outs := make([]CompleteResult, n)
	for i, c := range cs {
		if _, dup := at[c.RequestID]; dup {
			outs[i] = CompleteBusy // its twin holds the rows in this statement
			continue
		}
		at[c.RequestID] = i
		ids, callers, keys, tokens = append(ids, c.RequestID), append(callers, c.CallerID), append(keys, c.Key), append(tokens, pgUUID(c.Token))
		body := c.Body
		if l := c.Label; l != nil {
			lab := l.Label
			lab.CreatedAt = time.Time{} // the statement writes the transaction's time
			if body = lab.Body(); bytes.Count(body, []byte(labelCreatedAtZero)) != 1 {
				return nil, nil, nil, fmt.Errorf("postgres: label body without one %s: %s", labelCreatedAtZero, body)
			}
		}
		statuses, bodies = append(statuses, c.Status), append(bodies, string(body))
		if c.Traceparent != "" {
			traceparents = append(traceparents, &c.Traceparent)
		} else {
			traceparents = append(traceparents, nil)
		}
		if l := c.Label; l != nil {
			labelIDs, services, trackings = append(labelIDs, &l.LabelID), append(services, &l.Service), append(trackings, &l.TrackingNo)
			cls, ckeys, curs = append(cls, &l.CarrierLabelID), append(ckeys, &l.CarrierKey), append(curs, &l.Currency)
			orderIDs, costs = append(orderIDs, &l.OrderID), append(costs, &l.CostCents)
			parcelNos, versions = append(parcelNos, &l.ParcelNo), append(versions, &l.LabelVersion)
			purchased = append(purchased, l.PurchasedAt)
			if d := l.Document; d != nil {
				docURLs, docTypes, docSizes = append(docURLs, &d.URL), append(docTypes, &d.ContentType), append(docSizes, &d.SizeBytes)
			} else {
				docURLs, docTypes, docSizes = append(docURLs, nil), append(docTypes, nil), append(docSizes, nil)
			}
		} else {
			labelIDs, services, trackings = append(labelIDs, nil), append(services, nil), append(trackings, nil)
			cls, ckeys, curs = append(cls, nil), append(ckeys, nil), append(curs, nil)
			orderIDs, costs = append(orderIDs, nil), append(costs, nil)
			parcelNos, versions = append(parcelNos, nil), append(versions, nil)
			purchased = append(purchased, nil)
			docURLs, docTypes, docSizes = append(docURLs, nil), append(docTypes, nil), append(docSizes, nil)
		}
	}
	args := []any{ids, callers, keys, tokens, statuses, bodies,
		labelIDs, services, trackings, cls, ckeys, curs, orderIDs, costs, parcelNos, versions,
		purchased, retention.Seconds(), docURLs, docTypes, docSizes, traceparents}
	return args, at, outs, nil
}

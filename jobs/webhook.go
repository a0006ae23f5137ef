package jobs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/webhook"
)

// QueueWebhooks is the queue of webhook deliveries: its own, with its own
// concurrency, so that deliveries never take a purchase's place.
const QueueWebhooks = "webhooks"

// DeliverWebhookArgs names one webhook event by its label request. Jobs are
// unique by args: one event has one job however often it is dispatched.
type DeliverWebhookArgs struct {
	RequestID string `json:"request_id" river:"unique"`
}

// Kind implements river.JobArgs.
func (DeliverWebhookArgs) Kind() string { return "deliver_webhook" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (DeliverWebhookArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueWebhooks, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// WebhookConfig configures a [DeliverWebhookWorker]; zero values take the
// defaults (DefaultWebhookTimeout…).
type WebhookConfig struct {
	Pool         *pgxpool.Pool
	Timeout      time.Duration // WEBHOOK_TIMEOUT: one attempt
	RetryBase    time.Duration // WEBHOOK_RETRY_BASE
	RetryMax     time.Duration // WEBHOOK_RETRY_MAX
	MaxAttempts  int           // WEBHOOK_MAX_ATTEMPTS
	DisableAfter int           // WEBHOOK_DISABLE_AFTER
	// Concurrency is the deliveries the process runs at once, River's
	// MaxWorkers of the queue webhooks (WEBHOOK_CONCURRENCY); the last
	// quarter of them is kept for endpoints with no attempt in flight.
	Concurrency int
	// EndpointConcurrency bounds the attempts in flight at one endpoint in
	// the process (WEBHOOK_ENDPOINT_CONCURRENCY); a delivery past it is held.
	EndpointConcurrency int
	// HoldMax is the longest a held delivery waits before it asks for a slot
	// again (default DefaultWebhookHoldMax).
	HoldMax   time.Duration
	Policy    webhook.Policy
	SecretKey webhook.SecretKey // WEBHOOK_SECRET_KEY: opens sealed secrets
	Metrics   *metrics.Webhooks
	Log       zerolog.Logger
	// Client, when set, replaces the delivery client (whose dialer enforces
	// Policy); for tests of the client's own rules, leave it nil.
	Client *http.Client
	// BeforeSendFunc, when set, runs after the attempt is counted and before
	// the request is sent; for fault-injection tests.
	BeforeSendFunc func(ctx context.Context, eventID string) error
}

// Defaults of [WebhookConfig] (and of the WEBHOOK_* variables named in
// each comment); the concurrency's are in webhook_limit.go.
const (
	DefaultWebhookTimeout      = 15 * time.Second // WEBHOOK_TIMEOUT
	DefaultWebhookRetryBase    = 5 * time.Second  // WEBHOOK_RETRY_BASE
	DefaultWebhookRetryMax     = 10 * time.Hour   // WEBHOOK_RETRY_MAX
	DefaultWebhookMaxAttempts  = 12               // WEBHOOK_MAX_ATTEMPTS
	DefaultWebhookDisableAfter = 50               // WEBHOOK_DISABLE_AFTER
)

// orDefault sets *v to def when it is zero or negative: an unset setting.
func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

func (c *WebhookConfig) defaults() {
	orDefault(&c.Timeout, DefaultWebhookTimeout)
	orDefault(&c.RetryBase, DefaultWebhookRetryBase)
	orDefault(&c.RetryMax, DefaultWebhookRetryMax)
	orDefault(&c.MaxAttempts, DefaultWebhookMaxAttempts)
	orDefault(&c.DisableAfter, DefaultWebhookDisableAfter)
	orDefault(&c.Concurrency, DefaultWebhookConcurrency)
	orDefault(&c.EndpointConcurrency, DefaultWebhookEndpointConcurrency)
	orDefault(&c.HoldMax, DefaultWebhookHoldMax)
	if c.Metrics == nil {
		c.Metrics = metrics.NewWebhooks(nil)
	}
	if c.Client == nil {
		c.Client = webhook.NewClient(c.Timeout, c.Policy)
	}
}

// WebhookJobTimeout is the River job timeout of a delivery attempt with the
// given attempt timeout: room for its database work around the request.
func WebhookJobTimeout(timeout time.Duration) time.Duration { return timeout + 5*time.Second }

// DeliverWebhookWorker delivers one event: it counts the attempt on the
// event (committed before the request, so an attempt that dies mid-way is
// counted), signs and posts the event, and records the outcome. A failed
// attempt snoozes the job for the retry delay (the attempts are counted on
// the event, not by River, whose attempts are left for database errors).
//
// An endpoint gets at most EndpointConcurrency attempts in flight in the
// process (see endpointLimiter): a delivery past that is held, its job
// snoozed until its turn with no attempt counted, so that an endpoint that
// answers slowly or never delays its own events and not the other callers'.
type DeliverWebhookWorker struct {
	river.WorkerDefaults[DeliverWebhookArgs]
	cfg   WebhookConfig
	limit *endpointLimiter
}

// NewDeliverWebhookWorker returns a worker.
func NewDeliverWebhookWorker(cfg WebhookConfig) *DeliverWebhookWorker {
	cfg.defaults()
	return &DeliverWebhookWorker{cfg: cfg, limit: newEndpointLimiter(cfg.EndpointConcurrency, cfg.Concurrency, cfg.HoldMax)}
}

// Timeout implements river.Worker.
func (w *DeliverWebhookWorker) Timeout(*river.Job[DeliverWebhookArgs]) time.Duration {
	return WebhookJobTimeout(w.cfg.Timeout)
}

// EventBody is the JSON body of a delivery.
type EventBody struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// Work implements river.Worker.
func (w *DeliverWebhookWorker) Work(ctx context.Context, job *river.Job[DeliverWebhookArgs]) error {
	log := jobLogger(ctx, w.cfg.Log, job.JobRow).With().Str("request_id", job.Args.RequestID).Logger()
	result, err := w.work(ctx, job.Args.RequestID, &log)
	ev := log.Info()
	switch {
	case result == "held":
		ev = log.Debug() // no attempt: one line a turn would flood the log
	case err != nil && result != "retry":
		ev = log.Warn().Err(err)
	}
	ev.Str("outcome", result).Msg("deliver_webhook attempt")
	return err
}

func (w *DeliverWebhookWorker) work(ctx context.Context, requestID string, log *zerolog.Logger) (string, error) {
	cfg := w.cfg
	var slot *endpointSlot
	var hold time.Duration
	ev, res, reason, err := postgres.StartWebhookAttempt(ctx, cfg.Pool, requestID, func(callerID string) bool {
		slot, hold = w.limit.acquire(callerID)
		return slot != nil
	})
	if slot != nil {
		defer slot.release()
	}
	if err != nil {
		return "error", err
	}
	switch res {
	case postgres.AttemptHeld:
		cfg.Metrics.Held.Inc()
		*log = log.With().Str("caller", ev.CallerID).Dur("retry_in_ms", hold).Logger()
		return "held", river.JobSnooze(hold)
	case postgres.AttemptGone:
		return "cancelled", river.JobCancel(postgres.ErrNotFound)
	case postgres.AttemptFinal:
		return "already_final", nil
	case postgres.AttemptDropped:
		cfg.Metrics.Deliveries.WithLabelValues(reason).Inc()
		return reason, nil
	}
	*log = log.With().Str("caller", ev.CallerID).Str("webhook_id", ev.EventID).Int("attempt", ev.Attempt).Logger()
	body, err := w.body(ctx, ev)
	if err != nil {
		return "error", err
	}
	if cfg.BeforeSendFunc != nil {
		if err := cfg.BeforeSendFunc(ctx, ev.EventID); err != nil {
			return "crashed", err
		}
	}

	start := time.Now()
	// A secret that cannot be opened fails the attempt like a failed
	// request: nothing is sent unsigned, and the event is retried, then dropped.
	var status int
	var retryAfter time.Duration
	secrets, sendErr := w.open(ev)
	if sendErr == nil {
		status, retryAfter, sendErr = w.send(ctx, ev, body, secrets)
	}
	slot.release() // the endpoint's slot is the request's, not the bookkeeping's
	result := attemptResult(status, sendErr)
	cfg.Metrics.Attempts.WithLabelValues(result).Inc()
	cfg.Metrics.AttemptDuration.Observe(time.Since(start).Seconds())

	o := postgres.AttemptOutcome{Status: status}
	switch {
	case status >= 200 && status < 300:
		o.Delivered = true
	case status == http.StatusGone:
		o.Gone, o.Error = true, "410 Gone"
	default:
		o.Error = result
		if sendErr != nil {
			o.Error = sendErr.Error()
		}
		o.Exhausted = ev.Attempt >= cfg.MaxAttempts
	}
	// The outcome is recorded even when the job's context ends: the attempt was made.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	disabled, err := postgres.FinishWebhookAttempt(rctx, cfg.Pool, ev, o, cfg.DisableAfter)
	if errors.Is(err, postgres.ErrEventDropped) {
		// `api webhook delete` dropped it during the attempt.
		cfg.Metrics.Deliveries.WithLabelValues(metrics.WebhookDroppedDeleted).Inc()
		return metrics.WebhookDroppedDeleted, nil
	}
	if err != nil {
		return "error", err
	}
	// Every failed attempt says why, at warn: the cause is otherwise only
	// in webhook_events.last_error (a worker without the allowances the URL
	// needs refuses every delivery). Never the secret, nor the body.
	if !o.Delivered {
		cause := sendErr
		if cause == nil {
			cause = fmt.Errorf("the endpoint answered %d", status)
		}
		*log = log.With().AnErr("cause", cause).Logger()
	}
	if disabled {
		cfg.Metrics.EndpointsDisabled.Inc()
		log.Warn().Str("url", ev.URL).Msg("webhook endpoint disabled")
	}
	switch {
	case o.Delivered:
		cfg.Metrics.Deliveries.WithLabelValues(metrics.WebhookDelivered).Inc()
		return "delivered", nil
	case o.Gone:
		cfg.Metrics.Deliveries.WithLabelValues(metrics.WebhookGone).Inc()
		return "gone", nil
	case o.Exhausted:
		cfg.Metrics.Deliveries.WithLabelValues(metrics.WebhookExhausted).Inc()
		log.Warn().Str("result", result).Msg("webhook event dropped: every attempt failed")
		return "exhausted", nil
	}
	delay := RetryDelay(cfg.RetryBase, cfg.RetryMax, ev.Attempt, retryAfter)
	log.Warn().Str("result", result).Dur("retry_in_ms", delay).Msg("webhook attempt failed")
	return "retry", river.JobSnooze(delay)
}

// body renders the event: the label request as GET returns it, now.
func (w *DeliverWebhookWorker) body(ctx context.Context, ev *postgres.WebhookEvent) ([]byte, error) {
	in, err := postgres.GetIntent(ctx, w.cfg.Pool, ev.CallerID, ev.RequestID)
	if err != nil {
		return nil, err
	}
	lr, err := postgres.LabelRequestOf(ctx, w.cfg.Pool, in)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(lr)
	if err != nil {
		return nil, err
	}
	return json.Marshal(EventBody{Type: ev.Type, Timestamp: ev.CreatedAt.UTC(), Data: data})
}

// open returns the event's live secrets, newest first, opened. A secret
// that does not open (sealed under another WEBHOOK_SECRET_KEY) is left out
// while another one opens; with none, the attempt fails: nothing is sent
// unsigned.
func (w *DeliverWebhookWorker) open(ev *postgres.WebhookEvent) ([][]byte, error) {
	var out [][]byte
	var firstErr error
	for _, s := range ev.Secrets {
		secret, err := w.cfg.SecretKey.Open(ev.CallerID, s.Value, s.Sealed)
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		out = append(out, secret)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no signing secret of caller %s can sign: %w", ev.CallerID, cmp.Or(firstErr, errors.New("none is live")))
	}
	return out, nil
}

// send posts one attempt and returns the status (0 when none came) and the
// Retry-After of a 429 or 503.
func (w *DeliverWebhookWorker) send(ctx context.Context, ev *postgres.WebhookEvent, body []byte, secrets [][]byte) (int, time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, ev.URL, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	ts := time.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "labels-webhooks/1")
	req.Header.Set("webhook-id", ev.EventID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", webhook.Signature(ev.EventID, ts, body, secrets))
	resp, err := w.cfg.Client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	var retryAfter time.Duration
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return resp.StatusCode, retryAfter, nil
}

// RetryDelay is the wait before the attempt after attempt n (n ≥ 1): full
// jitter in [0, min(max, base·2^(n-1))), and at least retryAfter (the
// receiver's Retry-After), never more than max.
func RetryDelay(base, maxDelay time.Duration, n int, retryAfter time.Duration) time.Duration {
	ceiling := maxDelay
	if n >= 1 && n < 63 {
		if d := base << (n - 1); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	var d time.Duration
	if ceiling > 0 {
		d = time.Duration(rand.Int64N(int64(ceiling)))
	}
	return min(max(d, retryAfter), maxDelay)
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 when absent or bad.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return time.Duration(min(n, 1<<31)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// attemptResult is the result label of an attempt.
func attemptResult(status int, err error) string {
	var ne net.Error
	switch {
	case err != nil && (errors.Is(err, webhook.ErrForbiddenAddress) || errors.Is(err, webhook.ErrInsecureURL)):
		return "refused"
	case err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()):
		return "timeout"
	case err != nil:
		return "error"
	case status == 410, status == 429, status == 503:
		return strconv.Itoa(status)
	case status >= 200 && status < 600:
		return fmt.Sprintf("%dxx", status/100)
	}
	return "error"
}

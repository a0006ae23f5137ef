package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Webhook delivery outcomes, the values of WebhookDeliveries' outcome label:
// what became of each event.
const (
	WebhookDelivered       = "delivered"         // a 2xx
	WebhookGone            = "gone"              // a 410: dropped, the endpoint disabled
	WebhookExhausted       = "exhausted"         // every attempt failed: dropped
	WebhookDroppedDisabled = "endpoint_disabled" // the endpoint was disabled before delivery: dropped
	WebhookDroppedDeleted  = "endpoint_deleted"  // the endpoint was deleted: dropped
)

// WebhookOutcomes are the values of WebhookDeliveries' outcome label.
var WebhookOutcomes = []string{WebhookDelivered, WebhookGone, WebhookExhausted, WebhookDroppedDisabled, WebhookDroppedDeleted}

// WebhookAttemptResults are the values of WebhookAttempts' result label: the
// receiver's status class (2xx, 3xx, 4xx, 5xx; 410, 429 and 503 apart), or
// why no status came (timeout, refused: a forbidden address, error).
var WebhookAttemptResults = []string{"2xx", "3xx", "4xx", "410", "429", "5xx", "503", "timeout", "refused", "error"}

// Webhooks are the completion webhooks' metrics, kept apart from [Metrics]:
// only a worker registers them, with [NewWebhooks].
type Webhooks struct {
	Deliveries        *prometheus.CounterVec // outcome
	Attempts          *prometheus.CounterVec // result
	AttemptDuration   prometheus.Histogram
	EndpointsDisabled prometheus.Counter
	// Held counts the deliveries put back without an attempt because their
	// endpoint had its share of attempts in flight in the process.
	Held prometheus.Counter
}

// NewWebhooks returns the webhook metrics registered on r (nil: not registered).
func NewWebhooks(r prometheus.Registerer) *Webhooks {
	w := &Webhooks{
		Deliveries:        counterVec("labels_webhook_deliveries_total", "Webhook events finished, by outcome: delivered, gone (410), exhausted (every attempt failed), endpoint_disabled, endpoint_deleted (dropped undelivered).", "outcome"),
		Attempts:          counterVec("labels_webhook_attempts_total", "Webhook delivery attempts, by result: 2xx, 3xx, 4xx, 410, 429, 5xx, 503, timeout, refused (a forbidden address), error.", "result"),
		AttemptDuration:   histogram("labels_webhook_attempt_duration_seconds", "Webhook delivery attempt duration.", []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 30}),
		EndpointsDisabled: counter("labels_webhook_endpoints_disabled_total", "Webhook endpoints the worker disabled (a 410, or WEBHOOK_DISABLE_AFTER events in a row failed)."),
		Held:              counter("labels_webhook_held_total", "Webhook deliveries put back without an attempt: their endpoint had WEBHOOK_ENDPOINT_CONCURRENCY attempts in flight in the process (or the process's last quarter of WEBHOOK_CONCURRENCY was kept for other endpoints)."),
	}
	for _, o := range WebhookOutcomes {
		w.Deliveries.WithLabelValues(o)
	}
	for _, res := range WebhookAttemptResults {
		w.Attempts.WithLabelValues(res)
	}
	if r != nil {
		r.MustRegister(w.Deliveries, w.Attempts, w.AttemptDuration, w.EndpointsDisabled, w.Held)
	}
	return w
}

// WebhookGauges are the webhook figures read from the database.
type WebhookGauges struct {
	OldestUndelivered time.Duration // age of the oldest event not yet delivered or dropped
	Disabled          int           // endpoints disabled now
}

// WebhookCollector reads the webhook gauges at scrape time through read.
// Every worker of a fleet reports the same values: aggregate with max.
type WebhookCollector struct {
	read             func(context.Context) (WebhookGauges, error)
	oldest, disabled *prometheus.Desc
}

// NewWebhookCollector returns a collector of the gauges read returns.
func NewWebhookCollector(read func(context.Context) (WebhookGauges, error)) *WebhookCollector {
	return &WebhookCollector{
		read:     read,
		oldest:   prometheus.NewDesc("labels_webhook_oldest_undelivered_seconds", "Age of the oldest webhook event not yet delivered or dropped.", nil, nil),
		disabled: prometheus.NewDesc("labels_webhook_endpoints_disabled", "Webhook endpoints disabled now (api webhook set re-enables one).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *WebhookCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.oldest
	ch <- c.disabled
}

// Collect implements prometheus.Collector.
func (c *WebhookCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	g, err := c.read(ctx)
	if err != nil {
		return // labels_store_up reports the database
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, g.OldestUndelivered.Seconds())
	ch <- prometheus.MustNewConstMetric(c.disabled, prometheus.GaugeValue, float64(g.Disabled))
}

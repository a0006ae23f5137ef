package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/metrics"
)

// The webhook metrics register on their own registry, their counters exist
// at zero for every outcome and result, and the collector reports what it
// reads (nothing when the read fails).
func TestWebhookMetrics(t *testing.T) {
	t.Parallel()
	r := prometheus.NewRegistry()
	w := metrics.NewWebhooks(r)
	require.Equal(t, len(metrics.WebhookOutcomes), testutil.CollectAndCount(w.Deliveries))
	require.Equal(t, len(metrics.WebhookAttemptResults), testutil.CollectAndCount(w.Attempts))

	var fail bool
	r.MustRegister(metrics.NewWebhookCollector(func(context.Context) (metrics.WebhookGauges, error) {
		if fail {
			return metrics.WebhookGauges{}, errors.New("database away")
		}
		return metrics.WebhookGauges{OldestUndelivered: 90 * time.Second, Disabled: 2}, nil
	}))
	require.NoError(t, testutil.GatherAndCompare(r, strings.NewReader(`
# HELP labels_webhook_endpoints_disabled Webhook endpoints disabled now (api webhook set re-enables one).
# TYPE labels_webhook_endpoints_disabled gauge
labels_webhook_endpoints_disabled 2
# HELP labels_webhook_oldest_undelivered_seconds Age of the oldest webhook event not yet delivered or dropped.
# TYPE labels_webhook_oldest_undelivered_seconds gauge
labels_webhook_oldest_undelivered_seconds 90
`), "labels_webhook_endpoints_disabled", "labels_webhook_oldest_undelivered_seconds"))
	fail = true
	n, err := testutil.GatherAndCount(r, "labels_webhook_endpoints_disabled", "labels_webhook_oldest_undelivered_seconds")
	require.NoError(t, err)
	require.Zero(t, n)
}

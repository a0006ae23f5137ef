package stacktest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/worker"
)

// defaults fills in the worker settings both stacks share: a 30 s lease, a
// 5 s carrier timeout, 5 carrier attempts, a 10 ms retry base.
func defaults(lease, carrierTimeout *time.Duration, attempts *int, retryBase *time.Duration) {
	if *lease == 0 {
		*lease = worker.DefaultLeaseDuration
	}
	if *carrierTimeout == 0 {
		*carrierTimeout = 5 * time.Second
	}
	if *attempts == 0 {
		*attempts = 5
	}
	if *retryBase == 0 {
		*retryBase = 10 * time.Millisecond
	}
}

// webhookDefaults fills in the webhook settings both stacks share: a retry
// base of 10ms, and the allowance for raw secrets (a stack is a development
// setup: WEBHOOK_ALLOW_UNSEALED).
func webhookDefaults(c *jobs.WebhookConfig) {
	if c.RetryBase == 0 {
		c.RetryBase = 10 * time.Millisecond
	}
	c.SecretKey = c.SecretKey.AllowingUnsealed()
}

// startWorker starts what cmd/worker runs (worker.New), tuned for tests: 20
// carrier calls at once, fast fetches and retries (at most ten times the
// base apart), no periodic sweep. It stops when the test's stack does.
func startWorker(t testing.TB, ctx context.Context, cfg worker.Config) *worker.Worker {
	t.Helper()
	cfg.Concurrency = 20
	cfg.RetryMax = 10 * cfg.RetryBase
	cfg.SweepInterval = -1
	cfg.FetchCooldown = 20 * time.Millisecond
	cfg.FetchPollInterval = 50 * time.Millisecond
	cfg.RelayPollInterval = 100 * time.Millisecond
	cfg.TestOnly = true
	w, err := worker.New(cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	return w
}

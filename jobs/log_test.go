package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/internal/testutil/logtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
)

// One line per job attempt, with the intent, caller, key, attempt numbers,
// outcome and duration; never the carrier token, the caller's token or any
// part of the ship_to address, also when the carrier call fails.
func TestJobAttemptLogLine(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("fulfilment")
	address := []string{"Zebulon Quxworth", "77 Wobblegate Lane", "Flat Qv", "Frobnitzham", "QX7 3ZZ"}
	body := fmt.Appendf(nil, `{"order_id":5,"parcel_no":1,"weight_g":1450,"service":"ground","ship_to":{"name":%q,"line1":%q,"line2":%q,"city":%q,"postal_code":%q,"country":"DE"}}`,
		address[0], address[1], address[2], address[3], address[4])
	lr := s.Accept(tok, "k-log", body)

	// The real simulator behind a token; its first purchase call fails with 503.
	const carrierToken = "carrier-secret-Vq3x9Lr"
	simulator, err := sim.New(&sim.Options{Token: carrierToken})
	require.NoError(t, err)
	var calls atomic.Int32
	carrierSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/labels" && calls.Add(1) == 1 {
			http.Error(w, `{"code":"unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		simulator.ServeHTTP(w, r)
	}))
	t.Cleanup(carrierSrv.Close)

	var buf logtest.Buffer
	workers := river.NewWorkers()
	river.AddWorker(workers, jobs.NewBuyLabelWorker(jobs.BuyLabelConfig{
		Pool:           s.Pool,
		Carrier:        carrier.NewClient(carrierSrv.URL, &carrier.ClientOpts{Token: carrierToken}),
		CarrierTimeout: 5 * time.Second, LeaseDuration: 30 * time.Second, KeyRetention: time.Hour, MaxAttempts: 5,
		Metrics: metrics.New(metrics.Worker),
		Log:     zerolog.New(&buf),
	}))
	client, err := river.NewClient(riverpgxv5.New(s.Pool), &river.Config{
		Queues:            map[string]river.QueueConfig{jobs.QueueLabels: {MaxWorkers: 2}},
		Workers:           workers,
		RetryPolicy:       &jobs.RetryPolicy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		FetchCooldown:     20 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		TestOnly:          true,
	})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	})
	inserted, err := client.Insert(ctx, jobs.BuyLabelArgs{RequestID: lr.ID}, nil)
	require.NoError(t, err)

	final := s.Final(tok, lr.ID)
	require.Equal(t, "succeeded", final.Status)
	require.Eventually(t, func() bool { return len(buf.Lines(t, "buy_label attempt")) == 2 }, 30*time.Second, 10*time.Millisecond, buf.String())

	lines := buf.Lines(t, "buy_label attempt")
	for i, want := range []struct {
		level, outcome string
	}{{"warn", "carrier_unknown"}, {"info", "succeeded"}} {
		l := lines[i]
		require.Equal(t, want.level, l["level"], l)
		require.Equal(t, want.outcome, l["outcome"], l)
		require.Equal(t, lr.ID, l["request_id"], l)
		require.Equal(t, float64(inserted.Job.ID), l["job_id"], l)
		require.Equal(t, float64(i+1), l["job_attempt"], l)
		require.Equal(t, float64(i+1), l["carrier_attempt"], l)
		require.Equal(t, "fulfilment", l["caller"], l)
		require.Equal(t, "k-log", l["key"], l)
		require.IsType(t, float64(0), l["duration_ms"], l)
	}
	require.Contains(t, lines[0], "error", "a failed attempt says why")

	all := buf.String()
	for _, v := range address {
		require.NotContains(t, all, v, "a part of ship_to in the log")
	}
	require.NotContains(t, all, carrierToken)
	require.NotContains(t, all, tok)
	require.NotContains(t, all, "Bearer")
}

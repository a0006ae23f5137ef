package capacity

// The service in this process. The measurement runs the API's handler and
// the worker's River client, relay and buy-label worker inside its own
// process, on the current APIs of httpapi, jobs and outbox; startAPI and
// startWorker are the only places that build them.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/outbox"
	"github.com/labelkit/labels/tools/bench/internal/scratch"
)

// startAPI serves the API's handler (httpapi.NewServer over pool) on a
// loopback httptest server.
func startAPI(pool *pgxpool.Pool) *httptest.Server {
	return httptest.NewServer(httpapi.NewServer(httpapi.Deps{Pool: pool, Log: zerolog.Nop()}))
}

// startWorker runs the worker's side in this process, as cmd/worker wires
// it: River with the buy-label worker, and the outbox relay that dispatches
// the accepted intents to it, on a pool of their own to url, buying from c.
// stop stops River (waiting up to 30 s for running jobs) and the relay, and
// closes the pool; it may be called more than once.
func startWorker(ctx context.Context, url string, c jobs.Carrier) (stop func(), err error) {
	pool, err := scratch.Pool(ctx, url, 24, "")
	if err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, jobs.NewBuyLabelWorker(jobs.BuyLabelConfig{
		Pool: pool, Carrier: c, CarrierTimeout: 20 * time.Second, LeaseDuration: 30 * time.Second,
		KeyRetention: 24 * time.Hour, MaxAttempts: 20, Log: zerolog.Nop(),
	}))
	jobTimeout, rescueAfter := jobs.RiverTimings(30 * time.Second)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:                      map[string]river.QueueConfig{jobs.QueueLabels: {MaxWorkers: 100}},
		Workers:                     workers,
		JobTimeout:                  jobTimeout,
		RescueStuckJobsAfter:        rescueAfter,
		MaxAttempts:                 30,
		RetryPolicy:                 &jobs.RetryPolicy{Base: time.Second, Max: time.Hour},
		CompletedJobRetentionPeriod: 24 * time.Hour,
		Logger:                      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	if err := client.Start(wctx); err != nil {
		cancel()
		pool.Close()
		return nil, err
	}
	relay := outbox.NewRelay(pool, jobs.DispatchBuyLabels(client), zerolog.Nop(), &outbox.RelayOpts{PollInterval: 100 * time.Millisecond})
	var wg sync.WaitGroup
	wg.Go(func() { relay.Run(wctx) })
	var once sync.Once
	return func() {
		once.Do(func() {
			sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_ = client.Stop(sctx)
			scancel()
			cancel()
			wg.Wait()
			pool.Close()
		})
	}, nil
}

// fakeCarrier sells a label for every key, at once, like a carrier that
// always answers: the worker's database work is what is measured.
type fakeCarrier struct{ seq atomic.Int64 }

func (c *fakeCarrier) Buy(_ context.Context, _ string, req carrier.PurchaseRequest) (*carrier.Label, error) {
	n := c.seq.Add(1)
	return &carrier.Label{CarrierLabelID: fmt.Sprintf("CL-%d", 9_000_000+n), TrackingNo: fmt.Sprintf("GRD%09d", req.OrderID),
		CostCents: 612, Currency: "USD", PurchasedAt: time.Now().UTC()}, nil
}

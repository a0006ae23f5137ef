package capacity

// The service in this process. The measurement runs the API's handler and
// the worker (worker.New: River, the relay, the buy-label worker) inside its
// own process; startAPI and startWorker are the only places that build them.

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/tools/bench/internal/scratch"
	"github.com/labelkit/labels/worker"
)

// startAPI serves the API's handler (httpapi.NewServer over pool) on a
// loopback httptest server.
func startAPI(pool *pgxpool.Pool) *httptest.Server {
	return httptest.NewServer(httpapi.NewServer(httpapi.Deps{Pool: pool, Log: zerolog.Nop()}))
}

// startWorker runs the worker's side in this process, built by worker.New as
// cmd/worker builds it (without the periodic sweep), on a pool of its own to
// url, buying from c.
// stop stops River (waiting up to 30 s for running jobs) and the relay, and
// closes the pool; it may be called more than once.
func startWorker(ctx context.Context, url string, c jobs.Carrier) (stop func(), err error) {
	pool, err := scratch.Pool(ctx, url, 24, "")
	if err != nil {
		return nil, err
	}
	w, err := worker.New(worker.Config{Pool: pool, Carrier: c, SweepInterval: -1, RelayPollInterval: 100 * time.Millisecond, Log: zerolog.Nop()})
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_ = w.Stop(sctx)
			scancel()
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

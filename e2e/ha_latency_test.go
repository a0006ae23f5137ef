package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/failovertest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/postgres"
)

var (
	haLatency     = flag.Bool("ha-latency", false, "TestSyncStandbyLatency: measure the accept on a synchronous against an asynchronous standby")
	haSegment     = flag.Duration("ha-segment", 5*time.Second, "TestSyncStandbyLatency: the length of each measured stretch")
	haRounds      = flag.Int("ha-rounds", 4, "TestSyncStandbyLatency: rounds, each measuring every formation once")
	haConcurrency = flag.Int("ha-concurrency", 8, "TestSyncStandbyLatency: clients sending creates back to back")
)

// haTarget is one formation with the API in process in front of it.
type haTarget struct {
	name  string
	stack *stacktest.Stack
	token string
	ns    []int64
	n     int
	secs  float64
}

// What the synchronous standby costs the accept: the API in process (no
// worker: each create is the accept's transaction) on two formations, one
// with a synchronous standby (the manager's default), one with an
// asynchronous one, the same closed-loop load of new creates on each in
// turn (sync, async, then async, sync, and so on), p50 and p99 of each.
// Only with -ha-latency: it measures, it checks nothing.
//
//	go test -run TestSyncStandbyLatency -ha-latency -v ./e2e/
func TestSyncStandbyLatency(t *testing.T) {
	if !*haLatency {
		t.Skip("a measurement: -ha-latency runs it")
	}
	failovertest.SkipUnlessAvailable(t)
	var targets []*haTarget
	for _, async := range []bool{false, true} {
		f := failovertest.Start(t, failovertest.Options{Async: async})
		cfg, err := postgres.PoolConfig(f.CreateDatabase("labels"))
		require.NoError(t, err)
		cfg.MaxConns = int32(*haConcurrency) * 2
		s := stacktest.New(t, stacktest.Opts{Pool: migratedPool(t, cfg), NoWorker: true})
		name := "sync"
		if async {
			name = "async"
		}
		targets = append(targets, &haTarget{name: name, stack: s, token: s.Token("bench")})
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: *haConcurrency * 2}}
	var order atomic.Int64
	for _, tg := range targets { // warm up: connections, plans, caches
		measure(t, client, tg, &order, *haSegment/5)
		tg.ns, tg.n, tg.secs = nil, 0, 0
	}
	for round := range *haRounds {
		turn := slices.Clone(targets)
		if round%2 == 1 {
			slices.Reverse(turn)
		}
		for _, tg := range turn {
			measure(t, client, tg, &order, *haSegment)
		}
	}
	for _, tg := range targets {
		slices.Sort(tg.ns)
		t.Logf("%-5s %6d creates %7.1f/s  p50 %6.2f ms  p99 %6.2f ms", tg.name, tg.n, float64(tg.n)/tg.secs,
			ms(tg.ns[len(tg.ns)/2]), ms(tg.ns[len(tg.ns)*99/100]))
	}
	s, a := targets[0], targets[1]
	t.Logf("sync/async: p50 ×%.2f, p99 ×%.2f, throughput ×%.2f", float64(s.ns[len(s.ns)/2])/float64(a.ns[len(a.ns)/2]),
		float64(s.ns[len(s.ns)*99/100])/float64(a.ns[len(a.ns)*99/100]), (float64(s.n)/s.secs)/(float64(a.n)/a.secs))
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// measure sends new creates to tg from -ha-concurrency clients for d and
// adds their latencies; every one must be accepted (202).
func measure(t *testing.T, client *http.Client, tg *haTarget, order *atomic.Int64, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, *haConcurrency)
	start := time.Now()
	for range *haConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ns []int64
			defer func() { mu.Lock(); tg.ns = append(tg.ns, ns...); tg.n += len(ns); mu.Unlock() }()
			for ctx.Err() == nil {
				o := 1_000_000 + order.Add(1)
				req, _ := http.NewRequest(http.MethodPost, tg.stack.URL+"/v1/labels", bytes.NewReader(stacktest.ParcelBody(o, 1, 100)))
				req.Header.Set("Authorization", "Bearer "+tg.token)
				req.Header.Set("Idempotency-Key", fmt.Sprintf("label:%d:1:v1", o))
				req.Header.Set("Content-Type", "application/json")
				began := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					errs <- fmt.Errorf("%s: create answered %d", tg.name, resp.StatusCode)
					return
				}
				ns = append(ns, time.Since(began).Nanoseconds())
			}
		}()
	}
	wg.Wait()
	tg.secs += time.Since(start).Seconds()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

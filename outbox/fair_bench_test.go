package outbox_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// BenchmarkBurstOtherCaller is issue 33's fifth finding, scaled down: while
// caller "burst" sends 3,000 new keys as fast as 32 clients can, caller
// "other" sends one new key every 20 ms until the burst is final. Figures:
// the other caller's accept-to-final time (completed_at - created_at, from
// the database) at p50 and p99, the same caller's alone (the control: the
// same pace, no burst, in a fresh stack), their ratios, and the burst's own
// labels a second from its first accept to its last completion (what the
// relay's fairness costs the burst, if anything). The stack is stacktest's
// with the simulator (one worker, 20 slots). It reports, it never fails on a
// figure:
//
//	go test -run '^$' -bench BenchmarkBurstOtherCaller -benchtime 1x ./outbox/
func BenchmarkBurstOtherCaller(b *testing.B) {
	const burst = 3000
	for range b.N {
		control, _ := burstRun(b, 0)
		loaded, rate := burstRun(b, burst)
		cp50, cp99 := quantile(control, 0.50), quantile(control, 0.99)
		op50, op99 := quantile(loaded, 0.50), quantile(loaded, 0.99)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(ms(op50), "other_p50_ms")
		b.ReportMetric(ms(op99), "other_p99_ms")
		b.ReportMetric(ms(cp50), "control_p50_ms")
		b.ReportMetric(ms(cp99), "control_p99_ms")
		b.ReportMetric(ms(op50)/ms(cp50), "p50_ratio")
		b.ReportMetric(ms(op99)/ms(cp99), "p99_ratio")
		b.ReportMetric(rate, "burst_labels/s")
		b.ReportMetric(float64(len(loaded)), "other_samples")
	}
}

// burstRun runs one phase in a fresh stack: the other caller's paced creates,
// beside a burst of n creates when n > 0 (until the burst is final), or 150
// of them alone. It returns the other caller's accept-to-final times and the
// burst's labels a second.
func burstRun(b *testing.B, n int) ([]time.Duration, float64) {
	b.Helper()
	s := stacktest.NewSim(b, stacktest.SimOpts{})
	defer s.StopWorker()
	burstTok, otherTok := s.Token("burst"), s.Token("other")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}
	create := func(token, key string, order int64) {
		body := stacktest.ParcelBody(order, 1, 100)
		for {
			req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/labels", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			resp, err := client.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusCreated {
					return
				}
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			// A refusal (a 503, a limit) is retried with the same key, as a client does.
			b.Logf("create %s: %v; retrying", key, err)
			time.Sleep(100 * time.Millisecond)
		}
	}
	final := func(caller string) int {
		return s.Count(`SELECT count(*) FROM label_intents WHERE caller_id = $1 AND status <> 'pending'`, caller)
	}

	var burstDone atomic.Bool
	var wg sync.WaitGroup
	if n > 0 {
		var next atomic.Int64
		for range 32 {
			wg.Go(func() {
				for i := next.Add(1); i <= int64(n); i = next.Add(1) {
					create(burstTok, fmt.Sprintf("burst-%d", i), 100000+i)
				}
			})
		}
		wg.Go(func() {
			for final("burst") < n {
				time.Sleep(50 * time.Millisecond)
			}
			burstDone.Store(true)
		})
	}
	sent := 0
	tick := time.NewTicker(20 * time.Millisecond)
	for i := int64(1); ; i++ {
		if n > 0 && burstDone.Load() || n == 0 && i > 150 {
			break
		}
		wg.Go(func() { create(otherTok, fmt.Sprintf("other-%d", i), i) })
		sent++
		<-tick.C
	}
	tick.Stop()
	wg.Wait()
	for final("other") < sent {
		time.Sleep(50 * time.Millisecond)
	}

	ctx := context.Background()
	rows, err := s.Pool.Query(ctx, `SELECT caller_id, created_at, completed_at FROM label_intents`)
	if err != nil {
		b.Fatal(err)
	}
	var other []time.Duration
	var first, last time.Time
	for rows.Next() {
		var name string
		var created, completed time.Time
		if err := rows.Scan(&name, &created, &completed); err != nil {
			b.Fatal(err)
		}
		if name == "other" {
			other = append(other, completed.Sub(created))
			continue
		}
		if first.IsZero() || created.Before(first) {
			first = created
		}
		if completed.After(last) {
			last = completed
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	rate := 0.0
	if n > 0 {
		rate = float64(n) / last.Sub(first).Seconds()
	}
	return other, rate
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

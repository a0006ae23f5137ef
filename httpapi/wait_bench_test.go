package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labelkit/labels/internal/proc"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/proctest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/postgres"
)

// BenchmarkPreferWaitFlood is issue 33's Prefer: wait flood at a scale that
// runs here in about a minute: the real API binary (its defaults, no worker,
// so every intent stays pending), one caller holding BENCH_WAIT_FLOOD (default
// 5,000) Prefer: wait=30 requests on its pending keys at once, and another
// caller's creates (new keys, no preference, 100/s for 5 s, each on its own)
// timed with the flood held (from 3 s after the last flood request was sent)
// and, before it, without (the control). A flood
// request is sent again when answered, after its Retry-After, as the Go
// client would. The API's heap and RSS are read from its /metrics during
// each window (the largest of the samples).
//
//	go test -run '^$' -bench BenchmarkPreferWaitFlood -benchtime 1x ./httpapi/
//
// It reports other_p50_ms, other_p99_ms and other_503 (with the flood),
// control_p50_ms, control_p99_ms and control_503, p99_ratio, api_heap_mb and
// api_rss_mb of both windows, the database's committed transactions a second
// in each (flood_db_xact_per_s, control_db_xact_per_s: the API's reads are
// most of them), and flood_answered_at_once: flood requests
// answered within the window without being held. It never fails on a figure.
func BenchmarkPreferWaitFlood(b *testing.B) {
	flood := 5000
	if v := os.Getenv("BENCH_WAIT_FLOOD"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("BENCH_WAIT_FLOOD=%q: want a positive number", v)
		}
		flood = n
	}
	const otherRate, otherN = 100, 500

	bins := proctest.BuildT(b, "./cmd/api")
	pool, url := dbtest.New(b)
	ctx := context.Background()
	floodTok, err := postgres.AddCaller(ctx, pool, "flood")
	if err != nil {
		b.Fatal(err)
	}
	otherTok, err := postgres.AddCaller(ctx, pool, "other")
	if err != nil {
		b.Fatal(err)
	}
	// A free port, so that LOG_LEVEL=warn (no request lines) can hide the
	// listening line.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	api := proctest.StartT(b, bins.Path("api"), &proc.Opts{Name: "api", KeepLines: 200,
		Env: []string{"DATABASE_URL=" + url, "API_ADDR=" + addr, "LOG_FORMAT=json", "LOG_LEVEL=warn"}})
	hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := api.WaitHealthy(hctx, "http://"+addr); err != nil {
		b.Fatal(err)
	}
	base := "http://" + addr
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: flood + otherN, IdleConnTimeout: time.Minute}}

	// The flood's keys, accepted and pending.
	keys := make([]string, flood)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var acceptErr atomic.Value
	for i := range keys {
		keys[i] = fmt.Sprintf("flood-%d", i)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			st, _, err := createOnce(ctx, hc, base, floodTok, keys[i], stacktest.ParcelBody(int64(1_000_000+i), 1, 100), "")
			if err == nil && st != http.StatusAccepted {
				err = fmt.Errorf("status %d", st)
			}
			if err != nil {
				acceptErr.Store(err)
			}
		})
	}
	wg.Wait()
	if err, _ := acceptErr.Load().(error); err != nil {
		b.Fatalf("accepting the flood's keys: %v", err)
	}

	b.ResetTimer()
	control := otherCreates(ctx, pool, hc, base, otherTok, "control", otherRate, otherN)

	fctx, stopFlood := context.WithCancel(ctx)
	var written, atOnce atomic.Int64
	var floodDone sync.WaitGroup
	for i, key := range keys {
		floodDone.Go(func() {
			body := stacktest.ParcelBody(int64(1_000_000+i), 1, 100)
			first := true
			for fctx.Err() == nil {
				trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
					if first {
						written.Add(1)
						first = false
					}
				}}
				st, h, err := createOnce(httptrace.WithClientTrace(fctx, trace), hc, base, floodTok, key, body, "wait=30")
				if err != nil {
					return
				}
				if st == http.StatusAccepted && h.Get("Preference-Applied") == "" {
					atOnce.Add(1)
				}
				delay := time.Second
				if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
					delay = time.Duration(s) * time.Second
				}
				select {
				case <-fctx.Done():
				case <-time.After(delay):
				}
			}
		})
	}
	for written.Load() < int64(flood) {
		time.Sleep(10 * time.Millisecond)
	}
	// The held state, not the flood's arrival (an accept each), is what is
	// measured: let the API take them all in first.
	time.Sleep(3 * time.Second)
	other := otherCreates(ctx, pool, hc, base, otherTok, "other", otherRate, otherN)
	stopFlood()
	floodDone.Wait()
	b.StopTimer()

	b.ReportMetric(other.p50, "other_p50_ms")
	b.ReportMetric(other.p99, "other_p99_ms")
	b.ReportMetric(float64(other.unavailable), "other_503")
	b.ReportMetric(control.p50, "control_p50_ms")
	b.ReportMetric(control.p99, "control_p99_ms")
	b.ReportMetric(float64(control.unavailable), "control_503")
	if control.p99 > 0 {
		b.ReportMetric(other.p99/control.p99, "p99_ratio")
	}
	b.ReportMetric(other.heapMB, "flood_api_heap_mb")
	b.ReportMetric(other.rssMB, "flood_api_rss_mb")
	b.ReportMetric(control.heapMB, "control_api_heap_mb")
	b.ReportMetric(control.rssMB, "control_api_rss_mb")
	b.ReportMetric(other.xactPerS, "flood_db_xact_per_s")
	b.ReportMetric(control.xactPerS, "control_db_xact_per_s")
	b.ReportMetric(float64(atOnce.Load()), "flood_answered_at_once")
	b.ReportMetric(float64(flood), "flood_requests")
}

// createOnce posts one create and reads the answer.
func createOnce(ctx context.Context, hc *http.Client, base, token, key string, body []byte, prefer string) (int, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/labels", strings.NewReader(string(body)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header, err
}

// window is what one run of another caller's creates saw.
type window struct {
	p50, p99      float64 // ms
	unavailable   int     // 503s
	heapMB, rssMB float64 // the API's, the largest sampled
	xactPerS      float64 // the database's committed transactions a second (reads included)
}

// otherCreates sends n creates with new keys at rate per second, each on its
// own (open loop), and samples the API's memory and the database's
// transaction rate meanwhile.
func otherCreates(ctx context.Context, pool *pgxpool.Pool, hc *http.Client, base, token, prefix string, rate, n int) window {
	xacts := func() float64 {
		var x float64
		// The statistics are flushed within a second of a transaction.
		_ = pool.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&x)
		return x
	}
	x0, t0 := xacts(), time.Now()
	var mu sync.Mutex
	var lat []float64
	var w window
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			heap, rss := apiMemory(hc, base)
			mu.Lock()
			w.heapMB, w.rssMB = max(w.heapMB, heap), max(w.rssMB, rss)
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := range n {
		<-tick.C
		wg.Go(func() {
			start := time.Now()
			st, _, err := createOnce(ctx, hc, base, token, fmt.Sprintf("%s-%d", prefix, i), stacktest.ParcelBody(int64(2_000_000+i), 1, 100), "")
			d := float64(time.Since(start).Microseconds()) / 1000
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, d)
			if err == nil && st == http.StatusServiceUnavailable {
				w.unavailable++
			}
		})
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	w.xactPerS = (xacts() - x0) / time.Since(t0).Seconds()
	slices.Sort(lat)
	w.p50 = lat[len(lat)*50/100]
	w.p99 = lat[len(lat)*99/100]
	return w
}

// apiMemory reads the API's Go heap in use and its RSS (MB) from its /metrics.
func apiMemory(hc *http.Client, base string) (heap, rss float64) {
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes":
			heap = f / (1 << 20)
		case "process_resident_memory_bytes":
			rss = f / (1 << 20)
		}
	}
	return heap, rss
}

package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/otlptest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/internal/tracing"
	"github.com/labelkit/labels/postgres"
)

// BenchmarkCreateTracing is the cost of tracing on a create: the API's
// handler (served in process, no network) accepting new label requests one
// at a time against PostgreSQL, with tracing absent (never set up), off
// (set up with OTEL_SDK_DISABLED=true beside an endpoint), and on (an OTLP
// exporter to an in-test receiver, sampling 1% and 100% of the traces).
//
//	go test -run '^$' -bench BenchmarkCreateTracing -benchtime 2000x ./httpapi/
//
// cpu-µs/create is the process's CPU time (user and system, getrusage) per
// create, the spans' export and the final flush included; allocs/op is
// every allocation of the process meanwhile. PostgreSQL's own CPU is not in
// it.
func BenchmarkCreateTracing(b *testing.B) {
	pool, url := dbtest.New(b)
	token, err := postgres.AddCaller(context.Background(), pool, "bench")
	if err != nil {
		b.Fatal(err)
	}
	rc := otlptest.New(b)
	order := int64(0)
	for _, v := range []struct {
		name string
		env  map[string]string // nil: no setup at all
	}{
		{"absent", nil},
		{"off", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": rc.URL}},
		{"on_ratio_0.01", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rc.URL,
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}},
		{"on_ratio_1", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rc.URL,
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1"}},
	} {
		b.Run(v.name, func(b *testing.B) {
			shutdown := func(context.Context) error { return nil }
			if v.env != nil {
				if shutdown, err = tracing.Setup(context.Background(), func(k string) string { return v.env[k] }, "bench"); err != nil {
					b.Fatal(err)
				}
			}
			if want := strings.HasPrefix(v.name, "on"); tracing.On() != want {
				b.Fatalf("tracing on: %v, want %v", tracing.On(), want)
			}
			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				b.Fatal(err)
			}
			tracing.Pool(cfg)
			p, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			h := httpapi.NewServer(httpapi.Deps{Opts: accept.Opts{Pool: p}, Log: zerolog.Nop()})
			create := func() {
				order++
				req := httptest.NewRequest(http.MethodPost, "/v1/labels", strings.NewReader(string(stacktest.ParcelBody(order, 1, 900))))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-%d", order))
				rr := httptest.NewRecorder()
				h.ServeHTTP(rr, req)
				if rr.Code != http.StatusAccepted {
					b.Fatalf("create: %d %s", rr.Code, rr.Body)
				}
			}
			create() // the token's cache and the prepared statements warm
			b.ReportAllocs()
			b.ResetTimer()
			start := cpuTime()
			for range b.N {
				create()
			}
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := shutdown(sctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64((cpuTime()-start).Microseconds())/float64(b.N), "cpu-µs/create")
		})
	}
	b.Logf("spans received: %d", len(rc.Spans()))
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

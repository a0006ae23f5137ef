package accept_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/postgres"
)

// BenchmarkHeldKeyRow is issue 33's scenario of a key row held on the API
// side: a session holds an uncommitted UPDATE on one key row (a worker frozen
// inside its transaction) and that key's caller sends its replay to an API
// that has not seen the key, while another caller creates at a steady rate.
// It reports the other caller's create latency with the held row and the
// replay (other_p50_ms, other_p99_ms) and without them, in the same run and
// on the same API (control_p50_ms, control_p99_ms), their p99 ratio, and how
// long the replay took (replay_ms). The API runs with its defaults (claim
// wait 2 s, store timeout 5 s, shared transactions of 64).
//
//	go test ./accept -run '^$' -bench BenchmarkHeldKeyRow -benchtime 1x
func BenchmarkHeldKeyRow(b *testing.B) {
	const (
		rate  = 100             // the other caller's creates per second
		phase = 6 * time.Second // each phase's length
	)
	for b.Loop() {
		h := newHeldRowHarness(b, httpapi.Deps{})
		ctx := context.Background()
		owner, other := h.caller("owner"), h.caller("other")
		// The held key is taken by another API: the one measured has not
		// seen it, so its replay goes to the shared insert.
		seed := h.api(httpapi.Deps{})
		if s := h.create(ctx, seed, owner, "held", stacktest.ParcelBody(1, 1, 100)); s != http.StatusAccepted {
			b.Fatalf("seeding the held key: %d", s)
		}

		control := h.paced(ctx, other, "control", 1000, rate, phase, nil)

		_, release := h.holdKeyRow(ctx, "owner", "held")
		var replay time.Duration
		var replayStatus int
		held := h.paced(ctx, other, "held", 100000, rate, phase, func() {
			start := time.Now()
			replayStatus = h.create(ctx, h.url, owner, "held", stacktest.ParcelBody(1, 1, 100))
			replay = time.Since(start)
		})
		release()

		b.Logf("replay of the held key: %d after %s", replayStatus, replay.Round(time.Millisecond))
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(ms(percentile(control, 50)), "control_p50_ms")
		b.ReportMetric(ms(percentile(control, 99)), "control_p99_ms")
		b.ReportMetric(ms(percentile(held, 50)), "other_p50_ms")
		b.ReportMetric(ms(percentile(held, 99)), "other_p99_ms")
		b.ReportMetric(float64(percentile(held, 99))/float64(percentile(control, 99)), "p99_ratio")
		b.ReportMetric(ms(replay), "replay_ms")
	}
}

// heldRowHarness is a fresh database and an API on it (url), with what the
// held-row test and benchmark send.
type heldRowHarness struct {
	tb     testing.TB
	pool   *pgxpool.Pool
	dbURL  string
	url    string
	client *http.Client
}

func newHeldRowHarness(tb testing.TB, deps httpapi.Deps) *heldRowHarness {
	tb.Helper()
	pool, dbURL := dbtest.New(tb)
	h := &heldRowHarness{tb: tb, pool: pool, dbURL: dbURL,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000}}}
	tb.Cleanup(h.client.CloseIdleConnections)
	h.url = h.api(deps)
	return h
}

// api starts another API on the database and returns its base URL.
func (h *heldRowHarness) api(deps httpapi.Deps) string {
	h.tb.Helper()
	deps.Pool, deps.Log = h.pool, zerolog.Nop()
	srv := httptest.NewServer(httpapi.NewServer(deps))
	h.tb.Cleanup(srv.Close)
	return srv.URL
}

// caller adds a caller and returns its token.
func (h *heldRowHarness) caller(name string) string {
	h.tb.Helper()
	tok, err := postgres.AddCaller(context.Background(), h.pool, name)
	if err != nil {
		h.tb.Fatal(err)
	}
	return tok
}

// create posts a label request to the API at url and returns the status.
func (h *heldRowHarness) create(ctx context.Context, url, token, key string, body []byte) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/labels", bytes.NewReader(body))
	if err != nil {
		h.tb.Error(err)
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := h.client.Do(req)
	if err != nil {
		h.tb.Error(err)
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// holdKeyRow has a session of its own update the key row of (caller, key)
// as a worker's lease does, and keep its transaction open until release
// (or the end of the test): a worker frozen inside its transaction. The
// session waits for nothing and is never timed out. It returns the session's
// process id.
func (h *heldRowHarness) holdKeyRow(ctx context.Context, caller, key string) (pid uint32, release func()) {
	h.tb.Helper()
	conn, release := dbtest.HoldingSession(h.tb, h.dbURL)
	tag, err := conn.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() + interval '1 hour', lease_token = gen_random_uuid(),
		attempts = coalesce(attempts, 0) + 1 WHERE caller_id = $1 AND idem_key = $2`, caller, key)
	if err != nil || tag.RowsAffected() != 1 {
		h.tb.Fatalf("holding the key row %s/%s: %v (%d rows)", caller, key, err, tag.RowsAffected())
	}
	return conn.PgConn().PID(), release
}

// paced sends creates of new keys by token to the measured API at rate per
// second for d, each on its own (orders from firstOrder on), and returns
// their latencies once all are answered; during, when set, runs once at the
// start beside them. A create not answered 202 fails tb.
func (h *heldRowHarness) paced(ctx context.Context, token, prefix string, firstOrder int64, rate int, d time.Duration, during func()) []time.Duration {
	n := int(d.Seconds() * float64(rate))
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	if during != nil {
		wg.Go(during)
	}
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))))
		wg.Go(func() {
			began := time.Now()
			s := h.create(ctx, h.url, token, fmt.Sprintf("%s-%d", prefix, i), stacktest.ParcelBody(firstOrder+int64(i), 1, 100))
			took[i] = time.Since(began)
			if s != http.StatusAccepted {
				h.tb.Errorf("create %s-%d: %d", prefix, i, s)
			}
		})
	}
	wg.Wait()
	return took
}

// percentile returns the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// The per-caller rate limit: a caller past its burst gets 429 rate_limited
// with Retry-After (whole seconds until its next token), nothing is stored
// under the refused key, another caller is not affected, and after
// Retry-After the same key is accepted. The limiter's clock is the test's:
// no sleeps.
func TestRateLimitPerCaller(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	burst, other := s.Token("burst"), s.Token("other")

	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	advance := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	}
	// 2 creates a second, 3 at once.
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Deps{Opts: accept.Opts{Pool: s.Pool}, RateLimit: httpapi.RateLimit{
		PerSecond: 2, Burst: 3, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}}))
	t.Cleanup(srv.Close)
	api := &stacktest.Stack{T: t, URL: srv.URL, Pool: s.Pool}
	order := int64(0)
	create := func(token, key string) stacktest.Response {
		t.Helper()
		order++
		return api.Create(token, key, stacktest.ParcelBody(order, 1, 100))
	}
	stored := func(key string) int {
		return api.Count(`SELECT count(*) FROM idempotency_keys WHERE idem_key = $1`, key)
	}

	for _, key := range []string{"k1", "k2", "k3"} {
		require.Equal(t, http.StatusAccepted, create(burst, key).Status, key)
	}
	limited := create(burst, "k4")
	require.Equal(t, http.StatusTooManyRequests, limited.Status, string(limited.Body))
	require.Equal(t, "1", limited.Header.Get("Retry-After"), "the next token comes in 500 ms: 1 s, rounded up")
	require.Equal(t, "application/problem+json", limited.Header.Get("Content-Type"))
	p := stacktest.Decode[labels.Problem](t, limited.Body)
	require.Equal(t, labels.CodeRateLimited, p.Code)
	require.Equal(t, http.StatusTooManyRequests, p.Status)
	require.Zero(t, stored("k4"), "a refused create stores nothing")
	require.Equal(t, http.StatusTooManyRequests, create(burst, "k4").Status, "a refusal takes no token, and the clock has not moved")

	// Another caller has a bucket of its own.
	require.Equal(t, http.StatusAccepted, create(other, "o1").Status)

	// After Retry-After, the same key goes through; the next is refused again.
	advance(500 * time.Millisecond)
	require.Equal(t, http.StatusAccepted, create(burst, "k4").Status)
	require.Equal(t, 1, stored("k4"))
	require.Equal(t, http.StatusTooManyRequests, create(burst, "k5").Status)

	// An idle caller's bucket fills up to the burst, no further.
	advance(time.Hour)
	for _, key := range []string{"k5", "k6", "k7"} {
		require.Equal(t, http.StatusAccepted, create(burst, key).Status, key)
	}
	require.Equal(t, http.StatusTooManyRequests, create(burst, "k8").Status)

	// A slow rate: Retry-After is the whole wait for the next token.
	slow := httptest.NewServer(httpapi.NewServer(httpapi.Deps{Opts: accept.Opts{Pool: s.Pool}, RateLimit: httpapi.RateLimit{
		PerSecond: 0.1, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}}))
	t.Cleanup(slow.Close)
	api.URL = slow.URL
	require.Equal(t, http.StatusAccepted, create(other, "o2").Status)
	r := create(other, "o3")
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	require.Equal(t, "10", r.Header.Get("Retry-After"))

	// Without a limit (the default), nothing is refused.
	api.URL = s.URL
	for i := range 20 {
		require.Equal(t, http.StatusAccepted, create(burst, "free-"+string(rune('a'+i))).Status)
	}
}

package httpapi_test

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

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/postgres"
)

// A stalled database (every byte held, every socket open) delays each create
// by its own store timeout, not by the queue of creates before it: every one
// of many concurrent new creates answers 503 store_unavailable with
// Retry-After. The bound tells the two designs apart, not the machine's
// speed: a queue that waited batch after batch (120 creates in batches of 4,
// each batch a store timeout) would answer the last ones after 30 s; each
// create must answer within half that (an answer takes about the store
// timeout, 1 s, even beside a CPU hog). Once the database answers again,
// nothing accepted is lost: each retry under the same key is answered, and
// every stored key has its intent.
func TestStalledStoreAnswersEachCreateInTime(t *testing.T) {
	t.Parallel()
	direct, url := dbtest.New(t)
	pool, proxy := dbtest.ProxiedPool(t, url)
	const storeTimeout = time.Second
	// Batches of 4: a queue that waited batch after batch would take tens of
	// store timeouts to answer the last of them.
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Deps{Opts: accept.Opts{Pool: pool, Timeout: storeTimeout, Batch: 4}, Log: zerolog.Nop()}))
	defer srv.Close()
	ctx := context.Background()
	tok, err := postgres.AddCaller(ctx, direct, "fulfilment")
	require.NoError(t, err)
	client := &http.Client{Timeout: time.Minute}
	create := func(key string, order int64) (int, http.Header, time.Duration) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/labels", bytes.NewReader(stacktest.ParcelBody(order, 1, 100)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		start := time.Now()
		resp, err := client.Do(req)
		require.NoError(t, err, "every create gets an HTTP answer")
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header, time.Since(start)
	}
	status, _, _ := create("warm", 1) // caches the token
	require.Equal(t, http.StatusAccepted, status)

	proxy.Freeze()
	const n = 120
	var wg sync.WaitGroup
	statuses, took := make([]int, n), make([]time.Duration, n)
	retryAfter := make([]string, n)
	for i := range n {
		wg.Go(func() {
			var h http.Header
			statuses[i], h, took[i] = create(fmt.Sprintf("k%d", i), int64(100+i))
			retryAfter[i] = h.Get("Retry-After")
		})
	}
	wg.Wait()
	t.Logf("slowest 503: %s after it was sent (store timeout %s)", slices.Max(took), storeTimeout)
	for i := range n {
		require.Equal(t, http.StatusServiceUnavailable, statuses[i], "create %d", i)
		require.NotEmpty(t, retryAfter[i], "create %d", i)
		require.Less(t, took[i], n/4*storeTimeout/2, "create %d answered long before a queue of batches would have", i)
	}

	proxy.Thaw()
	for i := range n {
		status, _, _ := create(fmt.Sprintf("k%d", i), int64(100+i))
		require.Equal(t, http.StatusAccepted, status, "the retry of create %d", i)
	}
	var keys, orphans int
	require.NoError(t, direct.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&keys))
	require.NoError(t, direct.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys k
		WHERE NOT EXISTS (SELECT 1 FROM label_intents i WHERE i.request_id = k.request_id)`).Scan(&orphans))
	require.Equal(t, n+1, keys)
	require.Zero(t, orphans)
}

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/devdb"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// PostgreSQL goes away with intents in flight: the API answers 503
// store_unavailable with Retry-After and /readyz says 503; when the database
// comes back, everything resumes by itself and no accepted intent is lost or
// bought twice.
func TestLosingTheDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and stops a PostgreSQL server of its own")
	}
	t.Parallel()
	srv := dbtest.NewPrivate(t)
	ctx := context.Background()
	dbURL, err := devdb.EnsureDatabase(ctx, srv.URL, "labels")
	require.NoError(t, err)
	cfg, err := pgxpool.ParseConfig(dbURL + "&connect_timeout=2")
	require.NoError(t, err)
	pool := migratedPool(t, cfg)

	// A short lease: an attempt whose completion failed while the database was
	// away keeps its lease, and the next attempt takes it over when it expires.
	s := stacktest.New(t, stacktest.Opts{Pool: pool, RetryBase: 50 * time.Millisecond, LeaseDuration: 5 * time.Second, CarrierTimeout: 4 * time.Second})
	tok := s.Token("fulfilment")
	// The carrier is slow to answer the first purchases, so some intents are in flight when the database goes.
	s.Carrier.StallFirst(3)
	var ids []string
	for i := range 10 {
		ids = append(ids, s.Accept(tok, fmt.Sprintf("before-%d", i), stacktest.ParcelBody(int64(100+i), 1, 100)).ID)
	}
	require.Eventually(t, func() bool { return s.Carrier.Calls() >= 3 }, time.Minute, 20*time.Millisecond)

	srv.Stop()
	close(s.Carrier.Release) // the purchases in flight finish while the database is away

	r := s.Create(tok, "during", stacktest.ParcelBody(999, 1, 100))
	require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), `"code":"store_unavailable"`)
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	require.Equal(t, http.StatusServiceUnavailable, s.Do(http.MethodGet, "/readyz", "", nil).Status)
	require.Equal(t, http.StatusOK, s.Do(http.MethodGet, "/healthz", "", nil).Status)

	srv.Start()
	require.Eventually(t, func() bool {
		return s.Do(http.MethodGet, "/readyz", "", nil).Status == http.StatusOK
	}, time.Minute, 100*time.Millisecond)
	// The retry of the refused request, and new ones, are accepted again.
	for i := range 5 {
		ids = append(ids, s.Accept(tok, fmt.Sprintf("after-%d", i), stacktest.ParcelBody(int64(200+i), 1, 100)).ID)
	}
	for _, id := range ids {
		final := s.WaitFinal(tok, id)
		require.Contains(t, string(final.Body), `"status":"succeeded"`)
	}
	_, total := s.Carrier.Purchases("")
	require.Equal(t, len(ids), total, "one purchase per intent")
	labels := dbtest.Scalar[int](t, pool, `SELECT count(*) FROM labels`)
	require.Equal(t, len(ids), labels)
}

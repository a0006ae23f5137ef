package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// A database that refuses new connections (ALLOW_CONNECTIONS false and its
// sessions ended: every connect fails with SQLSTATE 55000) answers every
// request 503 store_unavailable with Retry-After, not only the first one that
// met a dead session: each request below opens a new connection, as after the
// pool's sessions were ended. /readyz says 503 as long; once connections are
// allowed again, creates are accepted.
func TestDatabaseRefusingConnections(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	s := stacktest.New(t, stacktest.Opts{NoWorker: true, Pool: pool})
	used, unused := s.Token("fulfilment"), s.Token("other")
	lr := s.Accept(used, "before", stacktest.ParcelBody(1, 1, 100))

	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dbtest.AdminURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	db := pgx.Identifier{pool.Config().ConnConfig.Database}.Sanitize()
	allow := func(on bool) {
		_, err := admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS %t`, db, on))
		require.NoError(t, err)
	}
	allow(false)
	t.Cleanup(func() { allow(true) })
	// End every session of the database and wait until each has gone.
	var alive int
	require.NoError(t, admin.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE NOT pg_terminate_backend(pid, 30000))
		  FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`,
		pool.Config().ConnConfig.Database).Scan(&alive))
	require.Zero(t, alive)

	requireUnavailable := func(r stacktest.Response) {
		t.Helper()
		requireProblem(t, r, http.StatusServiceUnavailable, "store_unavailable")
		require.Equal(t, "1", r.Header.Get("Retry-After"))
	}
	for i := range 4 {
		// Every request needs a new connection: the pool keeps none.
		pool.Reset()
		requireUnavailable(s.Create(used, fmt.Sprintf("during-%d", i), stacktest.ParcelBody(int64(10+i), 1, 100)))
		pool.Reset()
		requireUnavailable(s.Create(unused, fmt.Sprintf("during-%d", i), stacktest.ParcelBody(int64(10+i), 1, 100)))
		pool.Reset()
		requireUnavailable(s.Do(http.MethodGet, "/v1/label-requests/"+lr.ID, used, nil))
		pool.Reset()
		requireUnavailable(s.Do(http.MethodGet, "/readyz", "", nil))
	}

	allow(true)
	pool.Reset()
	require.Equal(t, http.StatusOK, s.Do(http.MethodGet, "/readyz", "", nil).Status)
	s.Accept(used, "during-0", stacktest.ParcelBody(10, 1, 100))
	s.Accept(unused, "after", stacktest.ParcelBody(20, 1, 100))
}

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/internal/fleet"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/proctest"
	"github.com/labelkit/labels/internal/testutil/replicatest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/migrations"
	"github.com/labelkit/labels/postgres"
)

// The primary dies (SIGKILL of its postmaster) and its streaming standby is
// promoted, as a failover manager would: the stack, given both servers in
// one multi-host URL with target_session_attrs=read-write, answers 503
// store_unavailable with Retry-After (never 500) and /readyz 503 while no
// server accepts writes, then follows the new primary without a restart:
// its pools reconnect, the notification listener and River's listener and
// leader come back on it, creates are accepted again, and the intent
// accepted (and replicated) before the kill ends final, bought once.
func TestFailoverToPromotedStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL primary and standby of its own")
	}
	t.Parallel()
	pair := replicatest.New(t)
	ctx := context.Background()
	cfg, err := postgres.PoolConfig(pair.CreateDatabase("labels"))
	require.NoError(t, err)
	require.Len(t, cfg.ConnConfig.Fallbacks, 1, "the pool knows both servers")
	pool := migratedPool(t, cfg)

	s := stacktest.New(t, stacktest.Opts{Pool: pool, RetryBase: 50 * time.Millisecond, LeaseDuration: 5 * time.Second, CarrierTimeout: 4 * time.Second})
	tok := s.Token("fulfilment")
	before := s.Accept(tok, "before", stacktest.ParcelBody(100, 1, 100))
	require.Contains(t, string(s.WaitFinal(tok, before.ID).Body), `"status":"succeeded"`)
	// The next purchase waits in the carrier while the primary dies.
	begun := s.Carrier.StallFirst(s.Carrier.Calls() + 1)
	inFlight := s.Accept(tok, "in-flight", stacktest.ParcelBody(101, 1, 100))
	waitUntil(t, "the purchase to reach the carrier", begun)
	pair.WaitReplayed()
	// What listens: the API's listener (which also wakes both relays; its
	// session's last statement is the LISTEN of its last channel) and River's.
	listens := []string{`LISTEN "label_%"`, `LISTEN "%river%"`}
	old, err := pgx.Connect(ctx, pair.Primary.URL("labels"))
	require.NoError(t, err)
	for _, pattern := range listens {
		require.Positive(t, sessionsThatRan(t, old, pattern), pattern)
	}
	old.Close(ctx)

	pair.KillPrimary()
	close(s.Carrier.Release) // the purchase finishes while no server accepts writes
	duringBody := stacktest.ParcelBody(102, 1, 100)
	requireUnavailable(t, s, tok, "during", duringBody, 5)

	pair.Promote()
	promoted, err := pgx.Connect(ctx, pair.Standby.URL("labels"))
	require.NoError(t, err)
	t.Cleanup(func() { promoted.Close(context.Background()) })
	leaderUntil := dbtest.Scalar[time.Time](t, promoted, `SELECT coalesce(max(expires_at), 'epoch') FROM river_leader`)

	during := acceptAfterPromotion(t, s, tok, "during", duringBody)
	after := s.Accept(tok, "after", stacktest.ParcelBody(103, 1, 100))

	for _, id := range []string{inFlight.ID, during.ID, after.ID} {
		require.Contains(t, string(s.WaitFinal(tok, id).Body), `"status":"succeeded"`, id)
	}
	_, bought := s.Carrier.Purchases("")
	require.Equal(t, 4, bought, "one purchase per intent")
	require.Equal(t, 4, dbtest.Scalar[int](t, promoted, `SELECT count(*) FROM labels`))

	// The listeners listen on the new primary; River's leader is re-elected there.
	for _, pattern := range listens {
		waitUntil(t, "a session on the new primary that ran "+pattern, func() bool {
			return sessionsThatRan(t, promoted, pattern) > 0
		}, func() {
			t.Logf("sessions: %q", dbtest.Scalar[[]string](t, promoted, `SELECT coalesce(array_agg(state || ': ' || query), '{}') FROM pg_stat_activity WHERE datname = 'labels'`))
		})
	}
	waitUntil(t, "River's leader to be re-elected on the new primary", func() bool {
		return dbtest.Scalar[bool](t, promoted, `SELECT coalesce(max(expires_at), 'epoch') > $1 FROM river_leader`, leaderUntil)
	})
}

// migratedPool opens a pool of cfg, closed when the test ends, and applies
// the migrations through it.
func migratedPool(t *testing.T, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = migrations.Apply(context.Background(), pool)
	require.NoError(t, err)
	return pool
}

// sessionsThatRan counts the sessions of the server of conn whose last
// statement is LIKE pattern.
func sessionsThatRan(t *testing.T, conn *pgx.Conn, pattern string) int {
	t.Helper()
	return dbtest.Scalar[int](t, conn, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE $1`, pattern)
}

// requireUnavailable sends the create of key n times while no server takes
// writes: each answered 503 store_unavailable with Retry-After: 1, and
// /readyz 503 after each; /healthz stays 200.
func requireUnavailable(t *testing.T, s *stacktest.Stack, token, key string, body []byte, n int) {
	t.Helper()
	for i := range n {
		r := s.Create(token, key, body)
		require.Equal(t, http.StatusServiceUnavailable, r.Status, "attempt %d: %s", i, r.Body)
		require.Contains(t, string(r.Body), `"code":"store_unavailable"`)
		require.Equal(t, "1", r.Header.Get("Retry-After"))
		require.Equal(t, http.StatusServiceUnavailable, s.Do(http.MethodGet, "/readyz", "", nil).Status)
	}
	require.Equal(t, http.StatusOK, s.Do(http.MethodGet, "/healthz", "", nil).Status)
}

// acceptAfterPromotion retries the refused create of key, as Retry-After
// says, until the stack reaches the promoted standby: 503 until then, never
// anything else. It logs how long that took, and requires /readyz 200.
func acceptAfterPromotion(t *testing.T, s *stacktest.Stack, token, key string, body []byte) labels.LabelRequest {
	t.Helper()
	promotedAt := time.Now()
	var r stacktest.Response
	waitUntil(t, "a create to be accepted on the new primary", func() bool {
		r = s.Create(token, key, body)
		require.Contains(t, []int{http.StatusAccepted, http.StatusServiceUnavailable}, r.Status, string(r.Body))
		return r.Status == http.StatusAccepted
	})
	t.Logf("the first create accepted %v after the promotion", time.Since(promotedAt).Round(time.Millisecond))
	require.Equal(t, http.StatusOK, s.Do(http.MethodGet, "/readyz", "", nil).Status)
	return stacktest.Decode[labels.LabelRequest](t, r.Body)
}

// waitUntil polls cond every 50ms until it holds; two minutes without it
// fail the test (a deadline far above the seconds the work takes).
func waitUntil(t *testing.T, what string, cond func() bool, onFail ...func()) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			for _, f := range onFail {
				f()
			}
			t.Fatal(fmt.Sprintf("still waiting after 2 minutes for %s", what))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The real binaries (api, worker, the carrier simulator) on a multi-host
// DATABASE_URL: `api migrate` and the services reach the primary, answer
// 503 store_unavailable while no server accepts writes, and carry on
// against the promoted standby without a restart.
func TestFailoverBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and starts a PostgreSQL primary and standby of its own")
	}
	t.Parallel()
	bins := proctest.BuildT(t, "./cmd/api", "./cmd/worker", "./cmd/carrier")
	pair := replicatest.New(t)
	db := fleet.DatabaseEnv(pair.CreateDatabase("labels"), "", false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := proctest.Fleet(t, fleet.Config{Bins: bins, Env: map[string]string{"LOG_FORMAT": "json"}, KeepLines: 2000})
	res, err := f.Migrate(ctx, db)
	require.NoError(t, err, "api migrate on the multi-host URL")
	require.Contains(t, res.Stdout, "applied 001_init.sql")
	token, err := f.AddCaller(ctx, "fulfilment", db)
	require.NoError(t, err)
	_, err = f.Start(ctx, fleet.Spec{Bin: "carrier"})
	require.NoError(t, err)
	api, err := f.Start(ctx, fleet.Spec{Bin: "api", Env: db})
	require.NoError(t, err)
	_, err = f.Start(ctx, fleet.Spec{Bin: "worker", Env: merge(db, map[string]string{"RETRY_BASE": "100ms", "RETRY_MAX": "1s"})})
	require.NoError(t, err)
	s := &stacktest.Stack{T: t, URL: api.URL(), Client: &http.Client{Timeout: time.Minute}}

	before := s.Accept(token, "before", stacktest.ParcelBody(100, 1, 100))
	require.Contains(t, string(s.WaitFinal(token, before.ID).Body), `"status":"succeeded"`)
	pair.WaitReplayed()

	pair.KillPrimary()
	duringBody := stacktest.ParcelBody(101, 1, 100)
	requireUnavailable(t, s, token, "during", duringBody, 3)

	pair.Promote()
	during := acceptAfterPromotion(t, s, token, "during", duringBody)
	require.Contains(t, string(s.WaitFinal(token, during.ID).Body), `"status":"succeeded"`)
	promoted, err := pgx.Connect(ctx, pair.Standby.URL("labels"))
	require.NoError(t, err)
	defer promoted.Close(ctx)
	require.Equal(t, 2, dbtest.Scalar[int](t, promoted, `SELECT count(*) FROM labels`))
	require.Empty(t, f.Crashes(), "no process exited")
}

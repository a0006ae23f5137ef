package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/fleet"
	"github.com/labelkit/labels/internal/proc"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/pgbouncertest"
	"github.com/labelkit/labels/internal/testutil/proctest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/postgres"
)

// poolerPoolSize is PgBouncer's default_pool_size in these tests: every
// process of the stack (an API pool of 20, two workers of 60) shares two
// server connections, so consecutive transactions of one client land on
// different sessions, and a session another client changed.
const poolerPoolSize = 2

// pooledStack is the real binaries (the API, two workers, the carrier
// simulator) on one database through a real PgBouncer in transaction mode.
// The API and worker-1 have DATABASE_DIRECT_URL (LISTEN direct); worker-2
// has none and polls (River's poll-only mode).
type pooledStack struct {
	t          *testing.T
	direct     *pgxpool.Pool // straight to PostgreSQL, for the checks
	directURL  string
	pooledURL  string
	api        *stacktest.Stack // the API, with the caller's token
	token      string
	carrierURL string
	workers    []*proc.Process
	metrics    []string // each worker's metrics base URL
	http       *http.Client
}

// startPooledStack migrates an empty database through the pooler (api
// migrate), adds a caller, and starts the simulator, the API and two
// workers, whose sweeper runs every second. The workers' lease and carrier
// timeout are far longer than any step takes on a busy machine: a test that
// needs a lease to end moves it into the past.
func startPooledStack(t *testing.T) *pooledStack {
	t.Helper()
	bins := proctest.BuildT(t, "./cmd/api", "./cmd/worker", "./cmd/carrier")
	pool, dbURL := dbtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// An empty database: the migrations run through the pooler too.
	_, err := pool.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`)
	require.NoError(t, err)
	bouncer := pgbouncertest.Start(t, dbURL, poolerPoolSize)
	s := &pooledStack{t: t, direct: pool, directURL: dbURL, pooledURL: bouncer.URL(dbURL),
		http: &http.Client{Timeout: time.Minute}}

	f := proctest.Fleet(t, fleet.Config{Bins: bins, Env: map[string]string{"LOG_FORMAT": "json"}, KeepLines: 2000})
	pooled := fleet.DatabaseEnv(dbURL, s.pooledURL, false)
	withDirect := fleet.DatabaseEnv(dbURL, s.pooledURL, true)
	res, err := f.Migrate(ctx, pooled)
	require.NoError(t, err, "api migrate through the pooler")
	require.Contains(t, res.Stdout, "applied 001_init.sql")
	res, err = f.Migrate(ctx, pooled)
	require.NoError(t, err)
	require.Contains(t, res.Stdout, "migrations up to date")
	s.token, err = f.AddCaller(ctx, "fulfilment", pooled)
	require.NoError(t, err)

	start := func(name, bin string, env ...map[string]string) string {
		p, err := f.Start(ctx, fleet.Spec{Bin: bin, Name: name, Env: merge(env...)})
		require.NoError(t, err, name)
		if bin == "worker" {
			s.workers = append(s.workers, p.Process)
			s.metrics = append(s.metrics, p.URL())
		}
		return p.URL()
	}
	s.carrierURL = start("carrier", "carrier", map[string]string{"SIM_LATENCY": "20ms"})
	s.api = &stacktest.Stack{T: t, URL: start("api", "api", withDirect), Client: s.http}
	workerEnv := map[string]string{"CARRIER_TIMEOUT": "1m", "LEASE_DURATION": "2m", "RETRY_BASE": "100ms", "RETRY_MAX": "1s",
		"SWEEP_INTERVAL": "1s", "LOG_LEVEL": "info"}
	start("worker-1", "worker", withDirect, workerEnv)
	start("worker-2", "worker", pooled, workerEnv)
	return s
}

// merge merges environments, later ones winning.
func merge(envs ...map[string]string) map[string]string {
	m := map[string]string{}
	for _, e := range envs {
		maps.Copy(m, e)
	}
	return m
}

func (s *pooledStack) create(key string, body []byte, headers ...string) stacktest.Response {
	s.t.Helper()
	return s.api.Create(s.token, key, body, headers...)
}

func (s *pooledStack) count(sql string, args ...any) int {
	s.t.Helper()
	return dbtest.Scalar[int](s.t, s.direct, sql, args...)
}

// metric reads a counter of worker i (0 when absent).
func (s *pooledStack) metric(i int, name string) float64 {
	s.t.Helper()
	resp, err := s.http.Get(s.metrics[i] + "/metrics")
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, name)), 64)
			require.NoError(s.t, err)
			return v
		}
	}
	return 0
}

// carrierPurchases is the simulator's count of labels sold.
func (s *pooledStack) carrierPurchases() int {
	s.t.Helper()
	resp, err := s.http.Get(s.carrierURL + "/sim/stats")
	require.NoError(s.t, err)
	defer resp.Body.Close()
	var st struct{ Purchases int }
	require.NoError(s.t, json.NewDecoder(resp.Body).Decode(&st))
	return st.Purchases
}

// The whole pipeline through PgBouncer in transaction mode, two server
// connections for everything: migrations, the seed's flow with its replays
// and Prefer: wait, many concurrent intents and repeats, fencing of a
// stalled worker, and the sweeper. Then every server session is checked for
// state a statement left behind.
func TestStackThroughPgBouncer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries behind PgBouncer")
	}
	t.Parallel()
	s := startPooledStack(t)

	// The seed's flow: 202 with Location, the outcome on Location with
	// Prefer: wait, then every repeat the saved 201 byte for byte; the same
	// key with another body is 422.
	body := stacktest.ParcelBody(918273, 1, 1450)
	first := s.create("label:918273:1:v1", body)
	require.Equal(t, http.StatusAccepted, first.Status, string(first.Body))
	loc := first.Header.Get("Location")
	require.True(t, strings.HasPrefix(loc, "/v1/label-requests/"), loc)
	require.Equal(t, "succeeded", s.api.Final(s.token, strings.TrimPrefix(loc, "/v1/label-requests/")).Status)
	replay := s.create("label:918273:1:v1", body)
	require.Equal(t, http.StatusCreated, replay.Status, string(replay.Body))
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	again := s.create("label:918273:1:v1", body)
	require.Equal(t, replay.Body, again.Body, "the saved outcome, byte for byte")
	other := s.create("label:918273:1:v1", stacktest.ParcelBody(918273, 1, 9999))
	require.Equal(t, http.StatusUnprocessableEntity, other.Status, string(other.Body))

	// Prefer: wait on the first POST: the outcome within the wait.
	waited := s.create("label:918274:1:v1", stacktest.ParcelBody(918274, 1, 100), "Prefer", "wait=20")
	require.Equal(t, http.StatusCreated, waited.Status, string(waited.Body))
	require.Equal(t, "wait=20", waited.Header.Get("Preference-Applied"))

	// Many clients on the two server connections: 60 intents, each sent three
	// times at once, then once more after it is final.
	const n = 60
	var wg sync.WaitGroup
	answers := make([][]stacktest.Response, n)
	for i := range n {
		answers[i] = make([]stacktest.Response, 3)
		for j := range 3 {
			wg.Go(func() {
				answers[i][j] = s.create(fmt.Sprintf("burst-%d", i), stacktest.ParcelBody(int64(20_000+i), 1, 100), "Prefer", "wait=30")
			})
		}
	}
	wg.Wait()
	for i := range n {
		for j := range 3 {
			a := answers[i][j]
			require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, a.Status, string(a.Body))
		}
		r := s.create(fmt.Sprintf("burst-%d", i), stacktest.ParcelBody(int64(20_000+i), 1, 100), "Prefer", "wait=30")
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	}
	require.Equal(t, n+2, s.count(`SELECT count(*) FROM labels`))
	require.Equal(t, n+2, s.count(`SELECT count(*) FROM label_intents WHERE status = 'succeeded'`))
	require.Equal(t, n+2, s.carrierPurchases(), "one purchase per intent")
	require.Positive(t, s.metric(0, `labels_job_outcomes_total{kind="buy_label",outcome="succeeded"}`)+
		s.metric(1, `labels_job_outcomes_total{kind="buy_label",outcome="succeeded"}`))

	// worker-2 alone (worker-1 stalled by SIGSTOP): with no direct
	// connection its relay and River poll, and it buys all the same.
	t.Cleanup(func() {
		for _, w := range s.workers {
			_ = w.Signal(syscall.SIGCONT) // stopped processes cannot stop
		}
	})
	const succeeded = `labels_job_outcomes_total{kind="buy_label",outcome="succeeded"}`
	before := s.metric(1, succeeded)
	require.NoError(t, s.workers[0].Signal(syscall.SIGSTOP))
	polled := s.create("poll-only", stacktest.ParcelBody(918275, 1, 100), "Prefer", "wait=30")
	require.Equal(t, http.StatusCreated, polled.Status, string(polled.Body))
	require.Equal(t, before+1, s.metric(1, succeeded))

	// Fencing: worker-2 stalls (SIGSTOP) in the middle of a purchase, the
	// lease and the job are moved into the past, worker-1 takes over and
	// completes; worker-2, resumed, is fenced off.
	setLatency := func(d string) {
		resp, err := s.http.Post(s.carrierURL+"/sim/config", "application/json", strings.NewReader(`{"latency":"`+d+`"}`))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	setLatency("1500ms")
	fence := s.create("k-fence", stacktest.ParcelBody(30, 1, 100))
	require.Equal(t, http.StatusAccepted, fence.Status, string(fence.Body))
	id := strings.TrimPrefix(fence.Header.Get("Location"), "/v1/label-requests/")
	require.Eventually(t, func() bool {
		return s.count(`SELECT count(*) FROM idempotency_keys WHERE idem_key = 'k-fence' AND lease_token IS NOT NULL`) == 1
	}, time.Minute, 20*time.Millisecond)
	require.NoError(t, s.workers[1].Signal(syscall.SIGSTOP))
	require.NoError(t, s.workers[0].Signal(syscall.SIGCONT))
	setLatency("0s")
	ctx := context.Background()
	_, err := s.direct.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() - interval '1 second' WHERE idem_key = 'k-fence'`)
	require.NoError(t, err)
	_, err = s.direct.Exec(ctx, `UPDATE river_job SET state = 'available', scheduled_at = now(), attempted_by = NULL WHERE args->>'request_id' = $1`, id)
	require.NoError(t, err)
	require.Equal(t, "succeeded", s.api.Final(s.token, id).Status)
	require.NoError(t, s.workers[1].Signal(syscall.SIGCONT))
	require.Eventually(t, func() bool { return s.metric(1, "labels_fencing_rejections_total") == 1 }, time.Minute, 50*time.Millisecond,
		"the stalled attempt's completion is fenced")
	require.Equal(t, 1.0, s.metric(0, "labels_lease_takeovers_total"))
	require.Equal(t, 1, s.count(`SELECT count(*) FROM labels WHERE request_id = $1`, id))

	// The sweeper: every key is purged once its retention is over (moved
	// into the past, by the database's clock the sweeper reads), each leaving
	// a tombstone.
	keys := s.count(`SELECT count(*) FROM idempotency_keys`)
	require.Equal(t, n+4, keys)
	_, err = s.direct.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.count(`SELECT count(*) FROM idempotency_keys`) == 0 }, 2*time.Minute, 200*time.Millisecond)
	require.Equal(t, keys, s.count(`SELECT count(*) FROM idempotency_tombstones`))
	require.Equal(t, n+4, s.count(`SELECT count(*) FROM labels`), "labels stay")

	s.checkSessions()
}

// checkSessions requires every server session of the pooler to be as a new
// one is (see sessionState).
func (s *pooledStack) checkSessions() {
	s.t.Helper()
	require.Empty(s.t, sessionState(s.t, s.pooledURL), "with server_reset_query empty, what a statement left on its session meets the next client")
}

// sessionState holds all poolerPoolSize server connections of the pooler at
// pooledURL at once, each in a transaction, and returns what makes a session
// differ from a new one: a prepared statement, a LISTEN, an advisory lock, a
// setting changed for the session.
func sessionState(t *testing.T, pooledURL string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const check = `SELECT pg_backend_pid(),
	       (SELECT count(*) FROM pg_prepared_statements),
	       (SELECT count(*) FROM pg_listening_channels()),
	       (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
	       (SELECT coalesce(string_agg(name || '=' || setting, ', ' ORDER BY name), '') FROM pg_settings
	         WHERE source = 'session' AND name NOT IN ('client_encoding', 'DateStyle', 'TimeZone', 'IntervalStyle',
	               'standard_conforming_strings', 'application_name', 'extra_float_digits'))`
	var conns []*pgx.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close(context.Background())
		}
	}()
	var found []string
	pids := map[int]bool{}
	for range poolerPoolSize {
		c := simpleConn(t, pooledURL)
		conns = append(conns, c)
		_, err := c.Exec(ctx, "BEGIN")
		require.NoError(t, err)
		var pid, prepared, listening, locks int
		var settings string
		require.NoError(t, c.QueryRow(ctx, check).Scan(&pid, &prepared, &listening, &locks, &settings))
		pids[pid] = true
		if prepared > 0 {
			found = append(found, fmt.Sprintf("session %d: %d prepared statements", pid, prepared))
		}
		if listening > 0 {
			found = append(found, fmt.Sprintf("session %d: listens on %d channels", pid, listening))
		}
		if locks > 0 {
			found = append(found, fmt.Sprintf("session %d: holds %d advisory locks", pid, locks))
		}
		if settings != "" {
			found = append(found, fmt.Sprintf("session %d: settings %s", pid, settings))
		}
	}
	require.Len(t, pids, poolerPoolSize, "every server connection was checked")
	return found
}

// simpleConn connects through the pooler with the simple protocol, which
// prepares nothing.
func simpleConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	return c
}

// The checks above can fail: through the same PgBouncer, pgx's default
// (named prepared statements, cached per client connection) breaks, where
// the services' pooled configuration does not; and a session-level SET, a
// session advisory lock or a LISTEN is found on the server session by
// sessionState.
func TestPoolerCatchesSessionState(t *testing.T) {
	t.Parallel()
	_, dbURL := dbtest.New(t)
	bouncer := pgbouncertest.Start(t, dbURL, poolerPoolSize)
	url := bouncer.URL(dbURL)
	ctx := context.Background()

	// Many clients, each running the same statement several times.
	load := func(cfg *pgxpool.Config) error {
		cfg.MaxConns = 10
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		defer p.Close()
		var mu sync.Mutex
		var first error
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Go(func() {
				for j := range 10 {
					var n int
					err := p.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE idem_key = $1`, fmt.Sprint(i, j)).Scan(&n)
					mu.Lock()
					if err != nil && first == nil {
						first = err
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return first
	}
	naive, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	err = load(naive)
	require.Error(t, err, "named prepared statements do not survive transaction pooling")
	require.Contains(t, err.Error(), "prepared statement")
	t.Logf("pgx's default through PgBouncer: %v", err)
	db, err := postgres.ParseEndpoints(url, dbURL, true)
	require.NoError(t, err)
	require.NoError(t, load(db.Pool))
	require.Equal(t, pgx.QueryExecModeCacheDescribe, db.Pool.ConnConfig.DefaultQueryExecMode)
	require.NotContains(t, db.Pool.ConnConfig.RuntimeParams, "idle_in_transaction_session_timeout", "PgBouncer refuses it")

	// Session state left behind is found. The naive pool's statements were
	// prepared on the sessions too: start from clean ones.
	cleanSessions(t, url)
	require.Empty(t, sessionState(t, url))
	for _, leak := range []struct{ sql, want string }{
		{"SET lock_timeout = '1s'", "settings lock_timeout=1000"},
		{"SELECT pg_advisory_lock(42)", "holds 1 advisory locks"},
		{"LISTEN some_channel", "listens on 1 channels"},
	} {
		c := simpleConn(t, url)
		_, err := c.Exec(ctx, leak.sql)
		require.NoError(t, err)
		require.NoError(t, c.Close(ctx))
		found := sessionState(t, url)
		require.Len(t, found, 1, leak.sql)
		require.Contains(t, found[0], leak.want)
		cleanSessions(t, url)
		require.Empty(t, sessionState(t, url), "cleaned after %s", leak.sql)
	}
}

// cleanSessions holds every server session of the pooler at once and resets
// each (effective at each commit).
func cleanSessions(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	var conns []*pgx.Conn
	for range poolerPoolSize {
		c := simpleConn(t, url)
		conns = append(conns, c)
		_, err := c.Exec(ctx, "BEGIN; DEALLOCATE ALL; RESET ALL; SELECT pg_advisory_unlock_all(); UNLISTEN *")
		require.NoError(t, err)
	}
	for _, c := range conns {
		_, err := c.Exec(ctx, "COMMIT")
		require.NoError(t, err)
		require.NoError(t, c.Close(ctx))
	}
}

// Package capacity measures what the key store costs on this machine, next to
// the seed's own sizing (512 B per record, 34.56 M keys a day, 17.7 GB at
// average load, 88.5 GB worst case), and gives the figures docs/capacity.md
// is built from. tools/bench runs it as its capacity command:
//
//	go run ./tools/bench capacity [--records 1000000] [--out FILE.json]
//
// It creates a scratch database (labels_capacity_<random>) on the server of
// DATABASE_URL (else 127.0.0.1:5432, see internal/devdb), migrates it, and
// runs its phases, each in a file of its own:
//
//  1. fill.go: fills N completed key records that look real (keys
//     label:{order}:{parcel}:v1, the real request fingerprint, a rendered
//     labels.Label as the saved response, ULID request ids), with their
//     succeeded intents and labels, by COPY, plus a few live (not yet
//     expired) keys the load replays; then VACUUM ANALYZE, and sizes.go
//     measures bytes per row of every table (heap, indexes, TOAST), and of a
//     sample written the way the API and the worker write it (insert
//     started, lease, complete);
//  2. pipeline.go: sends requests through the real API and the real relay +
//     River worker (with an in-process carrier, inprocess.go) and measures
//     WAL bytes and commits per accepted request and per completed label,
//     and their rates;
//  3. purge.go: purges the N expired keys with jobs.Sweep at several batch
//     sizes (each run over all N, restored in between), with tombstones, and
//     measures keys per second, WAL per key and batch latency; then the
//     tombstones' size and purge rate, and River's job cleaner over as many
//     completed jobs;
//  4. load.go: measures the API's latency under a steady load (a mix of new
//     accepts and replays) without a purge, during a purge of all N keys and
//     during one run of the periodic sweeper at the seed's peak (120,000
//     keys); the API's saturation rate; and the accept's transaction alone,
//     with and without its pg_notify;
//  5. partitions.go: evaluates daily partitions on expires_at: same fill,
//     bytes per row, insert + lookup latency against the plain table, purge
//     by tombstones + DETACH + DROP under load, and what the partitioned
//     table can no longer guarantee (uniqueness of (caller_id, idem_key), row
//     movement at completion);
//  6. scaleout.go: scales the measured costs to ten times the seed's peak
//     (20,000 creates/s).
//
// The machine is shared: every phase records how busy the CPUs were (this
// run, its database backends, everyone else, and what the host of a virtual
// machine stole, apart), through tools/bench/internal/host, and what this
// database's backends waited on (pg_stat_activity, sampled every 100 ms).
//
// [PrintReport] writes a readable report; the Report is also its JSON.
package capacity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labelkit/labels/internal/devdb"
	"github.com/labelkit/labels/migrations"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/tools/bench/internal/host"
	"github.com/labelkit/labels/tools/bench/internal/scratch"
)

// Config is what one measurement run does.
type Config struct {
	ServerURL    string        // DATABASE_URL; empty lets devdb choose
	Records      int           // expired completed keys, purged
	Live         int           // completed keys not yet expired
	Out          string        // JSON report file; empty: none
	SweepBatches []int         // SWEEP_BATCH sizes; the first also runs under load
	Clients      int           // steady-load clients
	Rate         float64       // steady-load requests per second, all clients together
	LoadSeconds  time.Duration // baseline load length
	MaxLoad      time.Duration // cap of a load that runs during a purge
	Pipeline     int           // requests through API + relay + worker
	SatSeconds   time.Duration // saturation run length
	Keep         bool          // keep the scratch database
	// LogFunc receives progress lines; nil discards them.
	LogFunc func(format string, args ...any)
}

// DefaultConfig returns the configuration of the documented run.
func DefaultConfig() Config {
	return Config{
		Records: 1_000_000, Live: 10_000, SweepBatches: []int{1000, 5000},
		Clients: 8, Rate: 400, LoadSeconds: 15 * time.Second, MaxLoad: 5 * time.Minute,
		Pipeline: 4000, SatSeconds: 8 * time.Second,
	}
}

// Validate checks the values that parsing alone cannot.
func (c *Config) Validate() error {
	switch {
	case c.Records < 100:
		return fmt.Errorf("--records %d: at least 100", c.Records)
	case c.Live < 10:
		return fmt.Errorf("--live %d: at least 10", c.Live)
	case len(c.SweepBatches) == 0:
		return errors.New("--sweep-batches: at least one batch size")
	case c.Clients < 1 || c.Clients > 64:
		return fmt.Errorf("--clients %d: 1 to 64", c.Clients)
	case c.Rate <= 0:
		return fmt.Errorf("--rate %g: must be positive", c.Rate)
	case c.LoadSeconds <= 0 || c.MaxLoad <= 0 || c.SatSeconds <= 0:
		return errors.New("--load-seconds, --max-load and --saturation must be positive")
	case c.Pipeline < 10:
		return fmt.Errorf("--pipeline %d: at least 10", c.Pipeline)
	}
	for _, b := range c.SweepBatches {
		if b < 1 || b > 100_000 {
			return fmt.Errorf("--sweep-batches: %d is not between 1 and 100000", b)
		}
	}
	return nil
}

// SeedPeakPerMinute is what one run of the periodic sweeper (SWEEP_INTERVAL
// 1m) purges at the seed's peak of 2,000 label creates a second.
const SeedPeakPerMinute = 2_000 * 60

// Fill ranges of order ids: filled records, the pipeline's, the load's.
const (
	fillOrderBase     = 100_000_000
	pipelineOrderBase = 600_000_000
	loadOrderBase     = 700_000_000
)

// callerWeights are the callers of the fill, by share of traffic.
var callerWeights = []struct {
	id    string
	share int // of 100
}{{"fulfilment", 70}, {"returns", 15}, {"marketplace-eu", 10}, {"b2b-portal", 5}}

// scratchPrefix starts the name of every scratch database; scratch.Drop
// drops no other.
const scratchPrefix = "labels_capacity_"

// env is one run: its scratch database, its pools, the in-process API and
// the keys the loads replay.
type env struct {
	cfg   Config
	logf  func(string, ...any)
	admin string // maintenance URL of the server
	name  string // scratch database
	url   string
	pool  *pgxpool.Pool
	dbOID uint32
	// walinspect is true when pg_walinspect could be created: WAL can then
	// be attributed to this database alone.
	walinspect bool
	tokens     map[string]string
	live       []liveKey
	api        *httptest.Server
	apiPool    *pgxpool.Pool
	client     *http.Client
	loadSeq    atomic.Int64
	benchSeq   atomic.Int64
	// day0 is the start of yesterday (UTC): the expired records expire within
	// [day0, day0+24h), so that they fill exactly one daily partition.
	day0 time.Time
	now0 time.Time
}

// liveKey is a completed key not yet expired: the loads replay it.
type liveKey struct {
	caller, key string
	body        []byte
}

// Measure runs every measurement in a scratch database and drops it.
func Measure(ctx context.Context, cfg Config) (rep *Report, err error) {
	logf := cfg.LogFunc
	if logf == nil {
		logf = func(string, ...any) {}
	}
	rep = &Report{StartedAt: time.Now().UTC(), Records: cfg.Records, Live: cfg.Live}
	e, err := newEnv(ctx, cfg, logf)
	if err != nil {
		return nil, err
	}
	rep.Database = e.name
	defer func() {
		if cerr := e.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if rep.Machine, err = e.machine(ctx); err != nil {
		return nil, err
	}
	steps := []struct {
		name string
		fn   func() error
	}{
		{"fill", func() (err error) { rep.Fill, err = e.fill(ctx); return err }},
		{"churned sample", func() (err error) { rep.Churned, err = e.churned(ctx); return err }},
		{"pipeline", func() (err error) { rep.Pipeline, err = e.pipeline(ctx); return err }},
		{"river jobs", func() error { return e.riverJobs(ctx) }},
		{"sizes", func() (err error) { rep.Sizes, err = e.sizes(ctx); return err }},
		{"purges", func() (err error) { rep.Purges, rep.Tombstones, rep.TombstonePurge, err = e.purges(ctx); return err }},
		{"river cleaner", func() (err error) { rep.RiverCleaner, err = e.riverCleaner(ctx); return err }},
		{"api load", func() (err error) { rep.Loads, err = e.apiLoads(ctx, &rep.Purges); return err }},
		{"partitions", func() (err error) { rep.Partitions, err = e.partitions(ctx, rep.Sizes); return err }},
	}
	for _, s := range steps {
		logf("%s", s.name)
		if err := s.fn(); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	rep.ScaleOut = scaleOut(rep)
	rep.Seconds = time.Since(rep.StartedAt).Seconds()
	return rep, nil
}

func newEnv(ctx context.Context, cfg Config, logf func(string, ...any)) (*env, error) {
	server, err := devdb.Ensure(ctx, devdb.Options{URL: cfg.ServerURL, Log: logf})
	if err != nil {
		return nil, err
	}
	name := scratch.Name(scratchPrefix)
	url, err := devdb.EnsureDatabase(ctx, server, name)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	e := &env{cfg: cfg, logf: logf, admin: server, name: name, url: url, tokens: map[string]string{},
		now0: now, day0: now.Truncate(24 * time.Hour).Add(-24 * time.Hour)}
	logf("scratch database %s", name)
	fail := func(err error) (*env, error) {
		_ = e.close()
		return nil, err
	}
	if e.pool, err = scratch.Pool(ctx, url, 4, ""); err != nil {
		return fail(err)
	}
	if _, err := migrations.Apply(ctx, e.pool); err != nil {
		return fail(err)
	}
	if err := e.pool.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = current_database()`).Scan(&e.dbOID); err != nil {
		return fail(err)
	}
	_, err = e.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`)
	e.walinspect = err == nil
	for _, c := range callerWeights {
		tok, err := postgres.AddCaller(ctx, e.pool, c.id)
		if err != nil {
			return fail(err)
		}
		e.tokens[c.id] = tok
	}
	if e.apiPool, err = scratch.Pool(ctx, url, 16, ""); err != nil {
		return fail(err)
	}
	e.api = startAPI(e.apiPool)
	e.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}, Timeout: 30 * time.Second}
	return e, nil
}

// close stops the API and drops the scratch database (unless Keep).
func (e *env) close() error {
	if e.api != nil {
		e.api.Close()
	}
	if e.apiPool != nil {
		e.apiPool.Close()
	}
	if e.pool != nil {
		e.pool.Close()
	}
	if e.cfg.Keep {
		e.logf("kept scratch database %s", e.name)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := scratch.Drop(ctx, e.admin, e.name, scratchPrefix)
	if err == nil {
		e.logf("dropped scratch database %s", e.name)
	}
	return err
}

// machine describes this machine and the server's settings.
func (e *env) machine(ctx context.Context) (Machine, error) {
	d := host.Describe()
	m := Machine{CPUs: d.CPUs, CPUModel: d.CPUModel, MemoryGiB: math.Round(d.MemoryGiB*10) / 10, GoVersion: d.GoVersion, Settings: map[string]string{}}
	if err := e.pool.QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&m.PostgreSQL); err != nil {
		return m, err
	}
	rows, err := e.pool.Query(ctx, `SELECT name, setting || coalesce(' ' || unit, '') FROM pg_settings
		WHERE name IN ('shared_buffers', 'synchronous_commit', 'fsync', 'full_page_writes', 'wal_compression',
		               'autovacuum', 'max_wal_size', 'checkpoint_timeout', 'wal_level', 'max_connections')`)
	if err != nil {
		return m, err
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return m, err
		}
		m.Settings[k] = v
	}
	return m, rows.Err()
}

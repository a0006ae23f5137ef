// Command capacity measures what the key store costs on this machine, next to
// the seed's own sizing (512 B per record, 34.56 M keys a day, 17.7 GB at
// average load, 88.5 GB worst case), and writes the figures docs/capacity.md
// is built from.
//
//	go run ./tools/capacity [--records 1000000] [--out FILE.json]
//
// It creates a scratch database (labels_capacity_<random>) on the server of
// DATABASE_URL (else 127.0.0.1:5432, see internal/devdb), migrates it, and:
//
//  1. fills N completed key records that look real (keys label:{order}:{parcel}:v1,
//     the real request fingerprint, a rendered labels.Label as the saved
//     response, ULID request ids), with their succeeded intents and labels, by
//     COPY, plus a few live (not yet expired) keys the load replays; then
//     VACUUM ANALYZE and measures bytes per row of every table (heap, indexes,
//     TOAST), and of a sample written the way the API and the worker write it
//     (insert started, lease, complete);
//  2. sends requests through the real API and the real relay + River worker
//     (with an in-process carrier) and measures WAL bytes and commits per
//     accepted request and per completed label, and their rates;
//  3. purges the N expired keys with jobs.Sweep at several batch sizes (each
//     run over all N, restored in between), with tombstones, and measures
//     keys per second, WAL per key and batch latency; then the tombstones'
//     size and purge rate, and River's job cleaner over as many completed jobs;
//  4. measures the API's latency under a steady load (a mix of new accepts and
//     replays) without a purge, during a purge of all N keys and during one
//     run of the periodic sweeper at the seed's peak (120,000 keys); the API's
//     saturation rate; and the accept's transaction alone, with and without
//     its pg_notify;
//  5. evaluates daily partitions on expires_at: same fill, bytes per row,
//     insert + lookup latency against the plain table, purge by tombstones +
//     DETACH + DROP under load, and what the partitioned table can no longer
//     guarantee (uniqueness of (caller_id, idem_key), row movement at completion);
//  6. scales the measured costs to ten times the seed's peak (20,000 creates/s).
//
// The machine is shared: every phase records how busy the CPUs were (this
// run, its database backends, everyone else) and what this database's
// backends waited on (pg_stat_activity, sampled every 100 ms).
//
// It prints a readable report, writes the JSON with --out, and drops the
// scratch database (unless --keep). Exit status: 0 done, 1 a measurement
// failed, 2 bad flags.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/caller"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/internal/devdb"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/migrations"
	"github.com/labelkit/labels/outbox"
)

func main() {
	os.Exit(run(context.Background(), os.Args, os.Getenv, os.Stdout, os.Stderr))
}

const usage = `Usage: capacity [flags]

Measures the key store on this machine in a scratch database
(labels_capacity_<random>, dropped at the end): bytes per record, purge rate,
the API's latency during a purge, daily partitions on expires_at, WAL per
request, scaled to 10x the seed's peak. Prints a report; --out writes JSON.

Flags:
  --records N        expired completed key records to fill and purge (default 1000000)
  --live N           completed keys not yet expired, replayed by the load (default 10000)
  --out FILE         write the report as JSON to FILE
  --sweep-batches L  comma-separated SWEEP_BATCH sizes to purge all N with;
                     the first is also used under load (default 1000,5000)
  --clients N        concurrent clients of the steady load (default 8)
  --rate R           requests per second of the steady load (default 400)
  --load-seconds D   length of a baseline load (default 15s)
  --max-load D       longest a load during a purge may run (default 5m)
  --pipeline N       requests sent through API, relay and worker for WAL per
                     request (default 4000)
  --saturation D     length of the closed-loop saturation run (default 8s)
  --keep             keep the scratch database

Environment: DATABASE_URL names the PostgreSQL server (its database name is
not used); without it, 127.0.0.1:5432, else a private server (internal/devdb).
`

// Config is what one measurement run does, read once in run.
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

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg := DefaultConfig()
	cfg.ServerURL = getenv("DATABASE_URL")
	fs := flag.NewFlagSet("capacity", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&cfg.Records, "records", cfg.Records, "")
	fs.IntVar(&cfg.Live, "live", cfg.Live, "")
	fs.StringVar(&cfg.Out, "out", "", "")
	batches := fs.String("sweep-batches", "1000,5000", "")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "")
	fs.DurationVar(&cfg.LoadSeconds, "load-seconds", cfg.LoadSeconds, "")
	fs.DurationVar(&cfg.MaxLoad, "max-load", cfg.MaxLoad, "")
	fs.IntVar(&cfg.Pipeline, "pipeline", cfg.Pipeline, "")
	fs.DurationVar(&cfg.SatSeconds, "saturation", cfg.SatSeconds, "")
	fs.BoolVar(&cfg.Keep, "keep", false, "")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "capacity: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "capacity: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg.SweepBatches = nil
	for _, s := range strings.Split(*batches, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintf(stderr, "capacity: --sweep-batches %q: %v\n", *batches, err)
			return 2
		}
		cfg.SweepBatches = append(cfg.SweepBatches, b)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "capacity: %v\n", err)
		return 2
	}
	cfg.LogFunc = func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := Measure(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "capacity: %v\n", err)
		return 1
	}
	rep.Command = "go run ./tools/capacity " + strings.Join(args[1:], " ")
	rep.Command = strings.TrimSpace(rep.Command)
	PrintReport(stdout, rep)
	if cfg.Out != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(cfg.Out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(stderr, "capacity: %v\n", err)
			return 1
		}
	}
	return 0
}

// ---------------------------------------------------------------------------
// The report.

// Report is everything one run measured.
type Report struct {
	Command        string     `json:"command"`
	StartedAt      time.Time  `json:"started_at"`
	Seconds        float64    `json:"seconds"`
	Database       string     `json:"database"`
	Machine        Machine    `json:"machine"`
	Records        int        `json:"records"`
	Live           int        `json:"live"`
	Fill           Fill       `json:"fill"`
	Sizes          []Size     `json:"sizes"`
	Churned        Size       `json:"churned_sample"`
	Tombstones     Size       `json:"tombstones"`
	Purges         []Purge    `json:"purges"`
	TombstonePurge Purge      `json:"tombstone_purge"`
	RiverCleaner   Purge      `json:"river_cleaner"`
	Loads          []Load     `json:"api_loads"`
	Pipeline       Pipeline   `json:"pipeline"`
	Partitions     Partitions `json:"partitions"`
	ScaleOut       ScaleOut   `json:"scale_out"`
}

// Machine describes where the figures come from.
type Machine struct {
	CPUs       int               `json:"cpus"`
	CPUModel   string            `json:"cpu_model"`
	MemoryGiB  float64           `json:"memory_gib"`
	GoVersion  string            `json:"go_version"`
	PostgreSQL string            `json:"postgresql"`
	Settings   map[string]string `json:"settings"`
}

// Fill is how the records were written.
type Fill struct {
	Rows       int     `json:"rows"`
	Seconds    float64 `json:"seconds"`
	RowsPerSec float64 `json:"rows_per_sec"`
	Method     string  `json:"method"`
}

// Size is one table's footprint.
type Size struct {
	Table         string      `json:"table"`
	Rows          int64       `json:"rows"`
	HeapBytes     int64       `json:"heap_bytes"`
	IndexBytes    int64       `json:"index_bytes"`
	ToastBytes    int64       `json:"toast_bytes"`
	TotalBytes    int64       `json:"total_bytes"`
	BytesPerRow   float64     `json:"bytes_per_row"`
	HeapPerRow    float64     `json:"heap_per_row"`
	IndexPerRow   float64     `json:"index_per_row"`
	ToastPerRow   float64     `json:"toast_per_row"`
	TupleBytesAvg float64     `json:"tuple_bytes_avg"` // avg(pg_column_size(row)): the data itself
	Indexes       []IndexSize `json:"indexes,omitempty"`
	Note          string      `json:"note,omitempty"`
}

// IndexSize is one index's footprint.
type IndexSize struct {
	Name   string  `json:"name"`
	Bytes  int64   `json:"bytes"`
	PerRow float64 `json:"per_row"`
}

// Purge is one purge run.
type Purge struct {
	Name             string  `json:"name"`
	Batch            int     `json:"batch"`
	Deleted          int64   `json:"deleted"`
	Seconds          float64 `json:"seconds"`
	KeysPerSec       float64 `json:"keys_per_sec"`
	Batches          int     `json:"batches"`
	BatchP50Ms       float64 `json:"batch_p50_ms"`
	BatchP99Ms       float64 `json:"batch_p99_ms"`
	BatchMaxMs       float64 `json:"batch_max_ms"`
	FirstTenthPerSec float64 `json:"first_tenth_keys_per_sec"`
	LastTenthPerSec  float64 `json:"last_tenth_keys_per_sec"`
	// WALBytes is the LSN distance over the whole purge: every database's WAL.
	WALBytes     int64   `json:"wal_bytes_cluster"`
	WALRawPerKey float64 `json:"wal_cluster_per_key"`
	// WALPerKey is this database's WAL per key over WALSampleKeys keys in
	// three windows (start, middle, end of the purge), read back with
	// pg_walinspect (0 when it could not be); WALNoFPIPerKey leaves out the
	// full-page images, which depend on how recently a checkpoint ran.
	WALPerKey         float64 `json:"wal_per_key"`
	WALNoFPIPerKey    float64 `json:"wal_no_fpi_per_key"`
	WALSampleKeys     int64   `json:"wal_sample_keys"`
	WALSampleFPIShare float64 `json:"wal_sample_fpi_share"`
	UnderLoad         bool    `json:"under_load"`
	RemainingExpired  int64   `json:"remaining_expired"`
	Host              Host    `json:"host"`
}

// Load is one load run against the API or the key table.
type Load struct {
	Name       string             `json:"name"`
	Target     string             `json:"target"`
	Clients    int                `json:"clients"`
	TargetRate float64            `json:"target_rate"` // 0: closed loop, as fast as it goes
	Seconds    float64            `json:"seconds"`
	Requests   int                `json:"requests"`
	PerSec     float64            `json:"per_sec"`
	Errors     int                `json:"errors"`
	Statuses   map[string]int     `json:"statuses"`
	P50Ms      float64            `json:"p50_ms"`
	P90Ms      float64            `json:"p90_ms"`
	P99Ms      float64            `json:"p99_ms"`
	MaxMs      float64            `json:"max_ms"`
	Kinds      map[string]Latency `json:"kinds"`
	During     string             `json:"during,omitempty"`
	Host       Host               `json:"host"`
}

// Latency summarises one kind of request.
type Latency struct {
	Count int     `json:"count"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// WAL is the write-ahead log one phase wrote.
type WAL struct {
	// RawBytes is the LSN distance: the whole cluster's WAL, other databases' included.
	RawBytes int64 `json:"raw_bytes"`
	// Filtered is true when the WAL was read back (pg_walinspect) and only
	// this database's records (and its transactions' commits) were counted.
	Filtered bool  `json:"filtered"`
	Bytes    int64 `json:"bytes"`
	FPIBytes int64 `json:"fpi_bytes"`
	Records  int64 `json:"records"`
	Commits  int64 `json:"commits"`
}

// Pipeline is WAL and throughput of whole requests.
type Pipeline struct {
	Requests          int     `json:"requests"`
	AcceptSeconds     float64 `json:"accept_seconds"`
	AcceptsPerSec     float64 `json:"accepts_per_sec"`
	AcceptWAL         WAL     `json:"accept_wal"`
	WALPerAccept      float64 `json:"wal_per_accept"`
	WALPerAcceptNoFPI float64 `json:"wal_per_accept_no_fpi"`
	CommitsPerAccept  float64 `json:"commits_per_accept"`
	AcceptHost        Host    `json:"accept_host"`
	WorkSeconds       float64 `json:"work_seconds"`
	LabelsPerSec      float64 `json:"labels_per_sec"`
	WorkWAL           WAL     `json:"work_wal"`
	WALPerLabel       float64 `json:"wal_per_label"`
	WALPerLabelNoFPI  float64 `json:"wal_per_label_no_fpi"`
	CommitsPerLabel   float64 `json:"commits_per_label"`
	WorkHost          Host    `json:"work_host"`
	Succeeded         int     `json:"succeeded"`
	RiverJobs         int     `json:"river_jobs_completed"`
}

// Partitions is the evaluation of daily partitions on expires_at.
type Partitions struct {
	Granularity string          `json:"granularity"`
	Parts       []PartitionInfo `json:"partitions"`
	FillSeconds float64         `json:"fill_seconds"`
	Size        Size            `json:"size"`
	PlainSize   Size            `json:"plain_size"`
	// PKError is what PostgreSQL answers to PRIMARY KEY (caller_id, idem_key).
	PKError string `json:"pk_error"`
	Drop    struct {
		Partition        string  `json:"partition"`
		Deleted          int64   `json:"deleted"`
		StartedRows      int64   `json:"started_rows"`
		TombstoneSeconds float64 `json:"tombstone_seconds"`
		DetachSeconds    float64 `json:"detach_seconds"`
		DropSeconds      float64 `json:"drop_seconds"`
		TotalSeconds     float64 `json:"total_seconds"`
		KeysPerSec       float64 `json:"keys_per_sec"`
		KeysPerSecNoTomb float64 `json:"keys_per_sec_without_tombstones"`
		WALBytes         int64   `json:"wal_bytes"`
	} `json:"drop"`
	PlainSweep Purge `json:"plain_sweep_under_load"`
	// Correctness.
	DuplicateRowsPartitioned int      `json:"duplicate_rows_partitioned"`
	DuplicateRowsPlain       int      `json:"duplicate_rows_plain"`
	RowMoved                 bool     `json:"row_moved"`
	MovedFrom                string   `json:"moved_from"`
	MovedTo                  string   `json:"moved_to"`
	ConcurrentLockPartition  string   `json:"concurrent_lock_partitioned"`
	ConcurrentLockPlain      string   `json:"concurrent_lock_plain"`
	Loads                    []Load   `json:"loads"`
	Adopted                  bool     `json:"adopted"`
	Reasons                  []string `json:"reasons"`
}

// PartitionInfo is one partition.
type PartitionInfo struct {
	Name string `json:"name"`
	From string `json:"from"`
	To   string `json:"to"`
	Rows int64  `json:"rows"`
}

// ScaleOut is the seed's arithmetic at ten times its peak, with measured costs.
type ScaleOut struct {
	PeakCreatesPerSec   float64 `json:"peak_creates_per_sec"`
	KeysPerDay          float64 `json:"keys_per_day"`
	SeedBytesPerKey     float64 `json:"seed_bytes_per_key"`
	SeedKeyStoreBytes   float64 `json:"seed_key_store_bytes"`
	BytesPerKey         float64 `json:"bytes_per_key"`
	BytesPerKeyChurned  float64 `json:"bytes_per_key_churned"`
	KeyStoreBytes       float64 `json:"key_store_bytes"`
	KeyStoreBytesHigh   float64 `json:"key_store_bytes_churned"`
	TombstoneBytes      float64 `json:"tombstone_bytes_30d"`
	RiverJobBytes       float64 `json:"river_job_bytes"`
	IntentLabelPerDay   float64 `json:"intents_labels_bytes_per_day"`
	WALPerLabel         float64 `json:"wal_per_label"`
	WALPerLabelNoFPI    float64 `json:"wal_per_label_no_fpi"`
	WALBytesPerSec      float64 `json:"wal_bytes_per_sec"`
	WALBytesPerSecNoFPI float64 `json:"wal_bytes_per_sec_no_fpi"`
	WALBytesPerDay      float64 `json:"wal_bytes_per_day"`
	CommitsPerLabel     float64 `json:"commits_per_label"`
	CommitsPerSec       float64 `json:"commits_per_sec"`
	PurgeKeysPerSec     float64 `json:"purge_keys_per_sec_needed"`
	MeasuredAccepts     float64 `json:"measured_accepts_per_sec"`
	CommitsNoNotify     float64 `json:"measured_commits_per_sec_no_notify"`
	CommitsNotify       float64 `json:"measured_commits_per_sec_notify"`
	MeasuredLabels      float64 `json:"measured_labels_per_sec"`
	MeasuredPurge       float64 `json:"measured_purge_keys_per_sec"`
	ShardsByAccepts     float64 `json:"shards_by_accepts_here"`
	ShardsByLabels      float64 `json:"shards_by_labels_here"`
}

// ---------------------------------------------------------------------------
// The run.

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
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	name := "labels_capacity_" + hex.EncodeToString(b)
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
	if e.pool, err = newPool(ctx, url, 4); err != nil {
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
		tok, err := caller.Add(ctx, e.pool, c.id)
		if err != nil {
			return fail(err)
		}
		e.tokens[c.id] = tok
	}
	if e.apiPool, err = newPool(ctx, url, 16); err != nil {
		return fail(err)
	}
	e.api = httptest.NewServer(httpapi.NewServer(httpapi.Deps{Pool: e.apiPool, Log: zerolog.Nop()}))
	e.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}, Timeout: 30 * time.Second}
	return e, nil
}

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
	conn, err := pgx.Connect(ctx, e.admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{e.name}.Sanitize()+` WITH (FORCE)`)
	if err == nil {
		e.logf("dropped scratch database %s", e.name)
	}
	return err
}

func newPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	return pgxpool.NewWithConfig(ctx, cfg)
}

func (e *env) machine(ctx context.Context) (Machine, error) {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Settings: map[string]string{}}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %g kB", &kb); err == nil {
			m.MemoryGiB = math.Round(kb/1024/1024*10) / 10
		}
	}
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

// ---------------------------------------------------------------------------
// 1. Fill.

// splitmix is a cheap deterministic hash: the same row always looks the same.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

var (
	firstNames = []string{"Anna", "Jonas", "Marie", "Lukas", "Sofia", "Noah", "Emma", "Elias", "Mia", "Paul", "Lea", "Finn"}
	lastNames  = []string{"Müller", "Schmidt", "Schneider", "Fischer", "Weber", "Meyer", "Wagner", "Becker", "Dubois", "Jansen", "Kowalski", "Rossi"}
	streets    = []string{"Hauptstraße", "Bahnhofstraße", "Rue de la Paix", "Kerkstraat", "Long Lane", "Ulica Polna", "Via Roma", "Gartenweg"}
	cities     = []struct{ city, country string }{{"Berlin", "DE"}, {"Hamburg", "DE"}, {"München", "DE"}, {"Paris", "FR"}, {"Lyon", "FR"}, {"Utrecht", "NL"}, {"Leeds", "GB"}, {"Kraków", "PL"}, {"Milano", "IT"}, {"Valencia", "ES"}}
	serviceOf  = []struct {
		name, prefix  string
		base, divisor int64
	}{{"ground", "GRD", 450, 10}, {"express", "EXP", 900, 5}, {"overnight", "OVN", 1800, 4}}
)

func (e *env) callerFor(h uint64) string {
	p := int(h % 100)
	for _, c := range callerWeights {
		if p < c.share {
			return c.id
		}
		p -= c.share
	}
	return callerWeights[0].id
}

// parcelFor is the parcel of row i: what a caller sent.
func parcelFor(order int64, parcelNo int, h uint64) labels.Parcel {
	c := cities[h%uint64(len(cities))]
	line2 := ""
	if h%5 == 0 {
		line2 = fmt.Sprintf("Apt %d", 1+h%40)
	}
	svc := 0
	switch r := (h >> 8) % 10; {
	case r >= 9:
		svc = 2
	case r >= 7:
		svc = 1
	}
	return labels.Parcel{
		OrderID: order, ParcelNo: parcelNo, WeightG: int(200 + (h>>16)%20000), Service: serviceOf[svc].name, LabelVersion: 1,
		ShipTo: labels.Address{
			Name:       firstNames[(h>>20)%uint64(len(firstNames))] + " " + lastNames[(h>>24)%uint64(len(lastNames))],
			Line1:      fmt.Sprintf("%s %d", streets[(h>>28)%uint64(len(streets))], 1+(h>>32)%180),
			Line2:      line2,
			City:       c.city,
			PostalCode: fmt.Sprintf("%05d", (h>>36)%100000),
			Country:    c.country,
		},
	}
}

// fillRow is one record with its intent and label, as COPY rows.
type fillRow struct {
	key, intent, label []any
	live               *liveKey
}

var (
	keyColumns    = []string{"caller_id", "idem_key", "request_hash", "fingerprint_version", "request_id", "state", "locked_until", "lease_token", "response_status", "response_body", "created_at", "expires_at"}
	intentColumns = []string{"request_id", "caller_id", "idem_key", "request_hash", "fingerprint_version", "order_id", "parcel_no", "label_version", "payload", "carrier_key", "status", "label_id", "error", "created_at", "dispatched_at", "completed_at"}
	labelColumns  = []string{"label_id", "caller_id", "request_id", "order_id", "parcel_no", "label_version", "service", "tracking_no", "carrier_label_id", "carrier_key", "cost_cents", "currency", "created_by_key", "purchased_at", "created_at"}
)

// row renders record i. Records 0..Records-1 expired yesterday, in completion
// order; the rest complete within the last 20 hours and expire later.
func (e *env) row(i int, entropy io.Reader) (fillRow, error) {
	h := splitmix(uint64(i))
	var completed time.Time
	live := i >= e.cfg.Records
	if !live {
		frac := float64(i) / float64(e.cfg.Records)
		completed = e.day0.Add(-24*time.Hour + time.Duration(frac*float64(24*time.Hour)))
	} else {
		frac := float64(i-e.cfg.Records) / float64(e.cfg.Live)
		completed = e.now0.Add(-time.Minute - time.Duration(frac*float64(20*time.Hour)))
	}
	completed = completed.Truncate(time.Microsecond)
	created := completed.Add(-time.Duration(600+h%2400) * time.Millisecond)
	expires := completed.Add(24 * time.Hour)
	callerID := e.callerFor(h)
	order := int64(fillOrderBase + i)
	parcelNo := 1 + int(h>>40)%3
	key := fmt.Sprintf("label:%d:%d:v1", order, parcelNo)
	parcel := parcelFor(order, parcelNo, h)
	canonical, err := idempotency.Canonical(parcel)
	if err != nil {
		return fillRow{}, err
	}
	hash := idempotency.Fingerprint(http.MethodPost, "/v1/labels", canonical)
	requestID := "lr_" + ulid.MustNew(ulid.Timestamp(created), entropy).String()
	svc := serviceOf[0]
	for _, s := range serviceOf {
		if s.name == parcel.Service {
			svc = s
		}
	}
	l := labels.Label{
		LabelID:        "lbl_" + ulid.MustNew(ulid.Timestamp(completed), entropy).String(),
		OrderID:        order,
		ParcelNo:       parcelNo,
		LabelVersion:   1,
		Service:        parcel.Service,
		TrackingNo:     fmt.Sprintf("%s%09d", svc.prefix, order),
		CarrierLabelID: fmt.Sprintf("CL-%d", 5_000_000+i),
		CostCents:      svc.base + int64(parcel.WeightG)/svc.divisor,
		Currency:       "USD",
		CreatedAt:      completed,
	}
	body := l.Body()
	payload, err := json.Marshal(parcel)
	if err != nil {
		return fillRow{}, err
	}
	carrierKey := carrier.DeriveKey(callerID, key)
	r := fillRow{
		key: []any{callerID, key, hash, int16(idempotency.FingerprintVersion), requestID, idempotency.StateCompleted,
			nil, nil, int32(201), string(body), created, expires},
		intent: []any{requestID, callerID, key, hash, int16(idempotency.FingerprintVersion), order, int32(parcelNo), int32(1),
			payload, carrierKey, labels.StatusSucceeded, l.LabelID, nil, created, created.Add(15 * time.Millisecond), completed},
		label: []any{l.LabelID, callerID, requestID, order, int32(parcelNo), int32(1), l.Service, l.TrackingNo, l.CarrierLabelID,
			carrierKey, l.CostCents, l.Currency, key, completed.Add(-40 * time.Millisecond), completed},
	}
	if live {
		r.live = &liveKey{caller: callerID, key: key, body: payload}
	}
	return r, nil
}

// fill writes Records + Live records with their intents and labels by COPY,
// in chunks rendered on every CPU, then keeps a copy of the key records
// (capacity_fill, unlogged) to restore between purges, and VACUUM ANALYZEs.
func (e *env) fill(ctx context.Context) (Fill, error) {
	total := e.cfg.Records + e.cfg.Live
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return Fill{}, err
	}
	defer conn.Release()
	t, err := conn.Conn().LoadType(ctx, "idempotency_state")
	if err != nil {
		return Fill{}, err
	}
	conn.Conn().TypeMap().RegisterType(t)

	start := time.Now()
	const chunk = 25_000
	workers := max(1, runtime.NumCPU())
	type rendered struct {
		rows []fillRow
		err  error
	}
	// Render the next chunk while the last one is copied.
	chunks := make(chan rendered, 1)
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(chunks)
		for off := 0; off < total && gctx.Err() == nil; off += chunk {
			n := min(chunk, total-off)
			rows := make([]fillRow, n)
			var wg sync.WaitGroup
			errs := make([]error, workers)
			for w := range workers {
				wg.Go(func() {
					entropy := mrand.NewChaCha8([32]byte{byte(w), byte(off), byte(off >> 8), byte(off >> 16)})
					for j := w; j < n; j += workers {
						if rows[j], errs[w] = e.row(off+j, entropy); errs[w] != nil {
							return
						}
					}
				})
			}
			wg.Wait()
			select {
			case chunks <- rendered{rows, errors.Join(errs...)}:
			case <-gctx.Done():
				return
			}
		}
	}()
	done := 0
	for c := range chunks {
		if c.err != nil {
			return Fill{}, c.err
		}
		part := c.rows
		for _, tbl := range []struct {
			name string
			cols []string
			get  func(fillRow) []any
		}{
			{"idempotency_keys", keyColumns, func(r fillRow) []any { return r.key }},
			{"label_intents", intentColumns, func(r fillRow) []any { return r.intent }},
			{"labels", labelColumns, func(r fillRow) []any { return r.label }}, // after its intents: foreign key
		} {
			i := 0
			_, err := conn.Conn().CopyFrom(ctx, pgx.Identifier{tbl.name}, tbl.cols, pgx.CopyFromFunc(func() ([]any, error) {
				if i >= len(part) {
					return nil, nil
				}
				i++
				return tbl.get(part[i-1]), nil
			}))
			if err != nil {
				return Fill{}, fmt.Errorf("copy %s: %w", tbl.name, err)
			}
		}
		for _, r := range part {
			if r.live != nil {
				e.live = append(e.live, *r.live)
			}
		}
		done += len(part)
		if done/chunk%8 == 0 || done == total {
			e.logf("  filled %d of %d", done, total)
		}
	}
	if done != total {
		return Fill{}, fmt.Errorf("filled %d of %d: %w", done, total, ctx.Err())
	}
	secs := time.Since(start).Seconds()
	for _, q := range []string{
		`CREATE UNLOGGED TABLE capacity_fill AS SELECT * FROM idempotency_keys`,
		// A day of older tombstones (other keys): in service the table is
		// never empty (TOMBSTONE_RETENTION, 30 days), and its statistics
		// decide the plan of the tombstone look-up in every accept.
		`CREATE UNLOGGED TABLE capacity_tombstones AS
		 SELECT caller_id, sha256(convert_to('purged-before:' || idem_key, 'UTF8')) AS key_hash,
		        expires_at - interval '1 day' AS purged_at
		   FROM capacity_fill WHERE expires_at < now()`,
		`INSERT INTO idempotency_tombstones SELECT * FROM capacity_tombstones`,
		`VACUUM ANALYZE idempotency_keys, label_intents, labels, idempotency_tombstones, capacity_fill`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			return Fill{}, err
		}
	}
	return Fill{Rows: total, Seconds: secs, RowsPerSec: float64(total) / secs,
		Method: "COPY (pgx CopyFrom) of key records, intents and labels, 25,000 rows a chunk"}, nil
}

// churned writes a sample the way the service writes a key: inserted started
// by the API, leased by the worker, completed with the response; then VACUUM.
// Dead versions leave free space a bulk load does not have: an upper bound.
func (e *env) churned(ctx context.Context) (Size, error) {
	sample := min(e.cfg.Records+e.cfg.Live, 200_000)
	for _, q := range []string{
		`CREATE TABLE capacity_churn (LIKE idempotency_keys INCLUDING ALL)`,
		fmt.Sprintf(`INSERT INTO capacity_churn (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, created_at, expires_at)
		 SELECT caller_id, idem_key, request_hash, fingerprint_version, request_id, 'started', created_at, created_at + interval '24 h'
		   FROM capacity_fill ORDER BY created_at LIMIT %d`, sample),
		`UPDATE capacity_churn SET locked_until = created_at + interval '30 s', lease_token = gen_random_uuid()`,
		`UPDATE capacity_churn c
		    SET state = 'completed', locked_until = NULL, lease_token = NULL, response_status = f.response_status,
		        response_body = f.response_body, expires_at = f.expires_at
		   FROM capacity_fill f WHERE f.caller_id = c.caller_id AND f.idem_key = c.idem_key`,
		`VACUUM ANALYZE capacity_churn`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			return Size{}, err
		}
	}
	s, err := tableSize(ctx, e.pool, "capacity_churn")
	if err != nil {
		return s, err
	}
	s.Table = "idempotency_keys (churned sample)"
	s.Note = "insert started, lease update, completion update, VACUUM: the dead versions' space stays with the table"
	_, err = e.pool.Exec(ctx, `DROP TABLE capacity_churn`)
	return s, err
}

// riverJobs adds one completed buy_label job per filled intent, shaped like
// the jobs the pipeline completed for real: River keeps completed jobs for
// CompletedJobRetentionPeriod = KEY_RETENTION, so it holds as many as there are keys.
func (e *env) riverJobs(ctx context.Context) error {
	tag, err := e.pool.Exec(ctx, `
		INSERT INTO river_job (state, attempt, max_attempts, attempted_at, created_at, finalized_at, scheduled_at, priority,
		                       args, attempted_by, errors, kind, metadata, queue, tags, unique_key, unique_states)
		SELECT t.state, t.attempt, t.max_attempts, i.dispatched_at + interval '20 ms', i.dispatched_at, i.completed_at,
		       i.dispatched_at, t.priority, jsonb_build_object('request_id', i.request_id), t.attempted_by, t.errors,
		       t.kind, t.metadata, t.queue, t.tags,
		       sha256(convert_to('&kind=buy_label&args=' || jsonb_build_object('request_id', i.request_id)::text, 'UTF8')),
		       t.unique_states
		  FROM label_intents i,
		       (SELECT * FROM river_job WHERE kind = 'buy_label' AND state = 'completed' ORDER BY id LIMIT 1) t
		 WHERE i.order_id >= $1 AND i.order_id < $2
		 ORDER BY i.completed_at`, fillOrderBase, fillOrderBase+e.cfg.Records+e.cfg.Live)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errors.New("no completed buy_label job to copy the shape of")
	}
	_, err = e.pool.Exec(ctx, `VACUUM ANALYZE river_job`)
	return err
}

// ---------------------------------------------------------------------------
// Sizes.

func (e *env) sizes(ctx context.Context) ([]Size, error) {
	var out []Size
	for _, t := range []string{"idempotency_keys", "label_intents", "labels", "river_job"} {
		s, err := tableSize(ctx, e.pool, t)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func tableSize(ctx context.Context, db *pgxpool.Pool, table string) (Size, error) {
	s := Size{Table: table}
	err := db.QueryRow(ctx, `
		SELECT pg_table_size(c.oid), pg_indexes_size(c.oid), pg_total_relation_size(c.oid),
		       coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0)
		  FROM pg_class c WHERE c.oid = $1::regclass`, table).Scan(&s.HeapBytes, &s.IndexBytes, &s.TotalBytes, &s.ToastBytes)
	if err != nil {
		return s, err
	}
	s.HeapBytes -= s.ToastBytes
	if err := db.QueryRow(ctx, `SELECT count(*), coalesce(avg(pg_column_size(t.*)), 0) FROM `+table+` t`).Scan(&s.Rows, &s.TupleBytesAvg); err != nil {
		return s, err
	}
	rows, err := db.Query(ctx, `SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index WHERE indrelid = $1::regclass ORDER BY 1`, table)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var ix IndexSize
		if err := rows.Scan(&ix.Name, &ix.Bytes); err != nil {
			return s, err
		}
		s.Indexes = append(s.Indexes, ix)
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	s.perRow()
	return s, nil
}

func (s *Size) perRow() {
	if s.Rows == 0 {
		return
	}
	n := float64(s.Rows)
	s.BytesPerRow = float64(s.TotalBytes) / n
	s.HeapPerRow = float64(s.HeapBytes) / n
	s.IndexPerRow = float64(s.IndexBytes) / n
	s.ToastPerRow = float64(s.ToastBytes) / n
	for i := range s.Indexes {
		s.Indexes[i].PerRow = float64(s.Indexes[i].Bytes) / n
	}
}

// ---------------------------------------------------------------------------
// WAL.

type walMark struct {
	lsn string
}

func (e *env) walMark(ctx context.Context) (walMark, error) {
	var m walMark
	err := e.pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&m.lsn)
	return m, err
}

// walSince measures the WAL written since m. When pg_walinspect is there and
// the range is at most limit bytes (reading WAL back is slow), it counts only
// this database's records and its transactions' commit records; the raw LSN
// distance counts every database on the server.
func (e *env) walSince(ctx context.Context, m walMark, limit int64) (WAL, error) {
	var w WAL
	var end string
	if err := e.pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text, pg_wal_lsn_diff(pg_current_wal_flush_lsn(), $1::pg_lsn)::bigint`, m.lsn).Scan(&end, &w.RawBytes); err != nil {
		return w, err
	}
	w.Bytes = w.RawBytes
	if !e.walinspect || w.RawBytes <= 0 || w.RawBytes > limit {
		return w, nil
	}
	pattern := fmt.Sprintf("%%/%d/%%", e.dbOID)
	err := e.pool.QueryRow(ctx, `
		WITH r AS MATERIALIZED (SELECT * FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)),
		     mine AS (SELECT DISTINCT xid FROM r WHERE block_ref LIKE $3 AND xid <> '0'::xid)
		SELECT coalesce(sum(record_length), 0)::bigint, coalesce(sum(fpi_length), 0)::bigint, count(*),
		       count(*) FILTER (WHERE resource_manager = 'Transaction' AND record_type LIKE 'COMMIT%')
		  FROM r
		 WHERE block_ref LIKE $3
		    OR (resource_manager = 'Transaction' AND xid IN (SELECT xid FROM mine))`, m.lsn, end, pattern).
		Scan(&w.Bytes, &w.FPIBytes, &w.Records, &w.Commits)
	if err != nil {
		// Segments recycled, or no permission: keep the raw distance.
		w.Bytes = w.RawBytes
		return w, nil
	}
	w.Filtered = true
	return w, nil
}

// ---------------------------------------------------------------------------
// Host: the CPUs are shared with other engineers' work, so every phase says
// how busy the machine was and what this database's backends waited on.

// Host is what the machine did during one phase.
type Host struct {
	BusyPct   float64 `json:"busy_pct"`   // all CPUs, everyone's work
	IOWaitPct float64 `json:"iowait_pct"` // all CPUs idle with I/O outstanding
	OwnPct    float64 `json:"own_pct"`    // this process: load generator, API, workers
	DBPct     float64 `json:"db_pct"`     // this database's backends
	OthersPct float64 `json:"others_pct"` // the rest: other work, PostgreSQL's background processes
	Load1     float64 `json:"load1"`
	// Waits counts what this database's active backends were doing, sampled
	// every 100 ms: wait_event_type:wait_event, or CPU when not waiting.
	Waits   map[string]int `json:"waits"`
	Samples int            `json:"samples"`
}

type cpuTimes struct{ total, idle, iowait uint64 }

func readCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var t cpuTimes
	for i := 1; i < len(f) && i <= 8; i++ {
		v, _ := strconv.ParseUint(f[i], 10, 64)
		t.total += v
		switch i {
		case 4:
			t.idle = v
		case 5:
			t.iowait = v
		}
	}
	return t
}

// procTicks returns a process's user + system CPU ticks.
func procTicks(pid string) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return u + st, true
}

type hostProbe struct {
	e       *env
	cpu     cpuTimes
	own     uint64
	db      map[string]uint64
	stop    chan struct{}
	done    chan struct{}
	waits   map[string]int
	samples int
}

// probe starts measuring the machine; end stops it.
func (e *env) probe(ctx context.Context) *hostProbe {
	p := &hostProbe{e: e, db: e.backendTicks(ctx), stop: make(chan struct{}), done: make(chan struct{}), waits: map[string]int{}}
	p.cpu = readCPU()
	p.own, _ = procTicks("self")
	cfg, err := pgx.ParseConfig(e.url)
	if err != nil {
		close(p.done)
		return p
	}
	cfg.RuntimeParams["application_name"] = "capacity-probe"
	go func() {
		defer close(p.done)
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return
		}
		defer conn.Close(context.WithoutCancel(ctx))
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rows, err := conn.Query(ctx, `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU')
				FROM pg_stat_activity
				WHERE datname = current_database() AND state = 'active' AND application_name <> 'capacity-probe'`)
			if err != nil {
				return
			}
			ws, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return
			}
			p.samples++
			for _, w := range ws {
				p.waits[w]++
			}
		}
	}()
	return p
}

// backendTicks returns the CPU ticks of this database's backends by pid.
func (e *env) backendTicks(ctx context.Context) map[string]uint64 {
	out := map[string]uint64{}
	rows, err := e.pool.Query(ctx, `SELECT pid::text FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return out
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return out
	}
	for _, pid := range pids {
		if t, ok := procTicks(pid); ok {
			out[pid] = t
		}
	}
	return out
}

func (p *hostProbe) end(ctx context.Context) Host {
	close(p.stop)
	<-p.done
	c := readCPU()
	own, _ := procTicks("self")
	h := Host{Waits: p.waits, Samples: p.samples}
	dt := float64(c.total - p.cpu.total)
	if dt <= 0 {
		return h
	}
	h.BusyPct = 100 * (dt - float64(c.idle-p.cpu.idle) - float64(c.iowait-p.cpu.iowait)) / dt
	h.IOWaitPct = 100 * float64(c.iowait-p.cpu.iowait) / dt
	h.OwnPct = 100 * float64(own-p.own) / dt
	var db uint64
	for pid, t := range p.e.backendTicks(ctx) {
		// A backend that started during the phase counts from zero.
		db += t - min(t, p.db[pid])
	}
	h.DBPct = 100 * float64(db) / dt
	h.OthersPct = max(0, h.BusyPct-h.OwnPct-h.DBPct)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.Load1, _ = strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	}
	return h
}

// topWaits renders the most frequent waits as shares of the samples.
func (h Host) topWaits(n int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	total := 0
	for k, v := range h.Waits {
		all = append(all, kv{k, v})
		total += v
	}
	if total == 0 {
		return "-"
	}
	slices.SortFunc(all, func(a, b kv) int { return b.v - a.v })
	var out []string
	for i, x := range all {
		if i == n {
			break
		}
		out = append(out, fmt.Sprintf("%s %.0f%%", x.k, 100*float64(x.v)/float64(total)))
	}
	return strings.Join(out, ", ")
}

func (h Host) String() string {
	return fmt.Sprintf("CPU %.0f%% busy (this run %.0f%%, its backends %.0f%%, others %.0f%%), iowait %.0f%%, load %.1f",
		h.BusyPct, h.OwnPct, h.DBPct, h.OthersPct, h.IOWaitPct, h.Load1)
}

// ---------------------------------------------------------------------------
// 2. Pipeline: WAL and commits per accepted request and per completed label.

// fakeCarrier sells a label for every key, at once, like a carrier that
// always answers: the worker's database work is what is measured.
type fakeCarrier struct{ seq atomic.Int64 }

func (c *fakeCarrier) Buy(_ context.Context, _ string, req carrier.PurchaseRequest) (*carrier.Label, error) {
	n := c.seq.Add(1)
	return &carrier.Label{CarrierLabelID: fmt.Sprintf("CL-%d", 9_000_000+n), TrackingNo: fmt.Sprintf("GRD%09d", req.OrderID),
		CostCents: 612, Currency: "USD", PurchasedAt: time.Now().UTC()}, nil
}

func (e *env) pipeline(ctx context.Context) (Pipeline, error) {
	p := Pipeline{Requests: e.cfg.Pipeline}
	m0, err := e.walMark(ctx)
	if err != nil {
		return p, err
	}
	probe := e.probe(ctx)
	start := time.Now()
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range e.cfg.Clients {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(e.cfg.Pipeline) || ctx.Err() != nil {
					return
				}
				order := pipelineOrderBase + i
				parcel := parcelFor(order, 1, splitmix(uint64(order)))
				body, _ := json.Marshal(parcel)
				status, err := e.post(ctx, "fulfilment", fmt.Sprintf("label:%d:1:v1", order), body)
				if err == nil && status != http.StatusAccepted {
					err = fmt.Errorf("accept answered %d", status)
				}
				if err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return p, firstErr
	}
	p.AcceptSeconds = time.Since(start).Seconds()
	p.AcceptsPerSec = float64(p.Requests) / p.AcceptSeconds
	p.AcceptHost = probe.end(ctx)
	if p.AcceptWAL, err = e.walSince(ctx, m0, 256<<20); err != nil {
		return p, err
	}
	p.WALPerAccept = float64(p.AcceptWAL.Bytes) / float64(p.Requests)
	p.WALPerAcceptNoFPI = float64(p.AcceptWAL.Bytes-p.AcceptWAL.FPIBytes) / float64(p.Requests)
	p.CommitsPerAccept = float64(p.AcceptWAL.Commits) / float64(p.Requests)

	// The worker side, as cmd/worker wires it: the relay and River with the
	// buy-label worker, against a carrier that always answers.
	workPool, err := newPool(ctx, e.url, 24)
	if err != nil {
		return p, err
	}
	defer workPool.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, jobs.NewBuyLabelWorker(jobs.BuyLabelConfig{
		Pool: workPool, Carrier: &fakeCarrier{}, CarrierTimeout: 20 * time.Second, LeaseDuration: 30 * time.Second,
		KeyRetention: 24 * time.Hour, MaxAttempts: 20, Log: zerolog.Nop(),
	}))
	jobTimeout, rescueAfter := jobs.RiverTimings(30 * time.Second)
	client, err := river.NewClient(riverpgxv5.New(workPool), &river.Config{
		Queues:                      map[string]river.QueueConfig{jobs.QueueLabels: {MaxWorkers: 100}},
		Workers:                     workers,
		JobTimeout:                  jobTimeout,
		RescueStuckJobsAfter:        rescueAfter,
		MaxAttempts:                 30,
		RetryPolicy:                 &jobs.RetryPolicy{Base: time.Second, Max: time.Hour},
		CompletedJobRetentionPeriod: 24 * time.Hour,
		Logger:                      nopSlog(),
	})
	if err != nil {
		return p, err
	}
	m1, err := e.walMark(ctx)
	if err != nil {
		return p, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	probe = e.probe(ctx)
	start = time.Now()
	if err := client.Start(wctx); err != nil {
		return p, err
	}
	relay := outbox.NewRelay(workPool, jobs.DispatchBuyLabels(client), zerolog.Nop(), &outbox.RelayOpts{PollInterval: 100 * time.Millisecond})
	var rwg sync.WaitGroup
	rwg.Go(func() { relay.Run(wctx) })
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var pending int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM label_intents WHERE order_id >= $1 AND order_id < $2 AND status = 'pending'`,
			pipelineOrderBase, pipelineOrderBase+p.Requests).Scan(&pending); err != nil {
			return p, err
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return p, fmt.Errorf("%d intents still pending after 5 minutes", pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.WorkSeconds = time.Since(start).Seconds()
	p.LabelsPerSec = float64(p.Requests) / p.WorkSeconds
	p.WorkHost = probe.end(ctx)
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	_ = client.Stop(sctx)
	scancel()
	cancel()
	rwg.Wait()
	if p.WorkWAL, err = e.walSince(ctx, m1, 256<<20); err != nil {
		return p, err
	}
	p.WALPerLabel = float64(p.WorkWAL.Bytes) / float64(p.Requests)
	p.WALPerLabelNoFPI = float64(p.WorkWAL.Bytes-p.WorkWAL.FPIBytes) / float64(p.Requests)
	p.CommitsPerLabel = float64(p.WorkWAL.Commits) / float64(p.Requests)
	err = e.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM label_intents WHERE order_id >= $1 AND order_id < $2 AND status = 'succeeded'),
		(SELECT count(*) FROM river_job WHERE kind = 'buy_label' AND state = 'completed')`,
		pipelineOrderBase, pipelineOrderBase+p.Requests).Scan(&p.Succeeded, &p.RiverJobs)
	return p, err
}

func nopSlog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// post sends one POST /v1/labels and returns the status.
func (e *env) post(ctx context.Context, callerID, key string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.api.URL+"/v1/labels", strings.NewReader(string(body)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+e.tokens[callerID])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// ---------------------------------------------------------------------------
// 3. Purges.

// restore gives the key records and the tombstones back the state of the
// fill (rows in the order they were filled, no dead versions, a day of older
// tombstones, fresh statistics), so that every purge starts from the same
// tables. Keys the load or the pipeline made go too; nothing measured needs them.
//
// The statistics matter: this server runs with autovacuum off, and a plan
// cached while the tombstone table looked empty (a sequential scan) would
// stay in use while a purge fills it, slowing every accept as the table
// grows. In service autovacuum's ANALYZE replaces such a plan within a minute.
func (e *env) restore(ctx context.Context) error {
	for _, q := range []string{
		`TRUNCATE idempotency_keys, idempotency_tombstones`,
		`INSERT INTO idempotency_keys SELECT * FROM capacity_fill`,
		`INSERT INTO idempotency_tombstones SELECT * FROM capacity_tombstones`,
		`VACUUM ANALYZE idempotency_keys, idempotency_tombstones`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// purgeTimer times the batches of one purge. In three windows (start,
// middle, end) it reads the WAL back, this database's records only, since a
// whole purge of a million keys is too much WAL to read; the pauses for
// reading are not counted.
type purgeTimer struct {
	e       *env
	p       *Purge
	probe   *hostProbe
	start   time.Time
	last    time.Time
	durs    []time.Duration
	counts  []int64
	windows []int // first batch of each WAL window
	size    int   // batches per window
	next    int   // the window to open or close next
	open    bool
	mark    walMark
	total   walMark
	wBytes  int64
	wFPI    int64
	wKeys   int64
	pause   time.Duration
}

func (e *env) newPurgeTimer(ctx context.Context, p *Purge, expected int) (*purgeTimer, error) {
	m, err := e.walMark(ctx)
	if err != nil {
		return nil, err
	}
	batches := max(1, expected/p.Batch)
	size := max(1, min(20_000/p.Batch, batches/10))
	var windows []int
	for _, f := range []float64{0, 0.45, 0.85} {
		w := int(f * float64(batches))
		if len(windows) > 0 && w < windows[len(windows)-1]+size {
			w = windows[len(windows)-1] + size
		}
		if w+size <= batches {
			windows = append(windows, w)
		}
	}
	t := &purgeTimer{e: e, p: p, probe: e.probe(ctx), windows: windows, size: size, mark: m, total: m}
	t.start = time.Now()
	t.last = t.start
	t.open = len(windows) > 0 && windows[0] == 0
	return t, nil
}

func (t *purgeTimer) batch(ctx context.Context, n int64) {
	now := time.Now()
	t.durs = append(t.durs, now.Sub(t.last))
	t.counts = append(t.counts, n)
	t.last = now
	if t.next >= len(t.windows) {
		return
	}
	done := len(t.durs) // batches completed
	w := t.windows[t.next]
	switch {
	case !t.open && done == w:
		if m, err := t.e.walMark(ctx); err == nil {
			t.mark, t.open = m, true
		}
	case t.open && done == w+t.size:
		var keys int64
		for _, c := range t.counts[w:done] {
			keys += c
		}
		if r, err := t.e.walSince(ctx, t.mark, 128<<20); err == nil && r.Filtered {
			t.wBytes += r.Bytes
			t.wFPI += r.FPIBytes
			t.wKeys += keys
		}
		t.open = false
		t.next++
	default:
		return
	}
	t.pause += time.Since(now)
	t.last = time.Now()
}

func (t *purgeTimer) finish(ctx context.Context) error {
	t.p.Seconds = (time.Since(t.start) - t.pause).Seconds()
	t.p.Host = t.probe.end(ctx)
	summarisePurge(t.p, t.durs, t.counts)
	if t.wKeys > 0 {
		t.p.WALSampleKeys = t.wKeys
		t.p.WALPerKey = float64(t.wBytes) / float64(t.wKeys)
		t.p.WALNoFPIPerKey = float64(t.wBytes-t.wFPI) / float64(t.wKeys)
		t.p.WALSampleFPIShare = float64(t.wFPI) / float64(max(1, t.wBytes))
	}
	w, err := t.e.walSince(ctx, t.total, 0)
	if err != nil {
		return err
	}
	t.p.WALBytes = w.RawBytes
	if t.p.Deleted > 0 {
		t.p.WALRawPerKey = float64(w.RawBytes) / float64(t.p.Deleted)
	}
	return nil
}

// sweep runs jobs.Sweep (the worker's purge) over every expired key, or,
// when keys > 0, over the first keys of them (the sweeper's "now" set to
// when the keys-th expired), as one run of the periodic sweeper would.
func (e *env) sweep(ctx context.Context, name string, batch, keys int) (Purge, error) {
	p := Purge{Name: name, Batch: batch}
	pool, err := newPool(ctx, e.url, 2)
	if err != nil {
		return p, err
	}
	defer pool.Close()
	now, expected := time.Now(), e.cfg.Records
	if keys > 0 && keys < e.cfg.Records {
		// Record i expires at day0 + i/Records × 24 h (see row).
		now = e.day0.Add(time.Duration(float64(keys) / float64(e.cfg.Records) * float64(24*time.Hour)))
		expected = keys
	}
	t, err := e.newPurgeTimer(ctx, &p, expected)
	if err != nil {
		return p, err
	}
	p.Deleted, err = jobs.Sweep(ctx, pool, now, batch, func(n int64) { t.batch(ctx, n) })
	if err != nil {
		return p, err
	}
	if err := t.finish(ctx); err != nil {
		return p, err
	}
	err = e.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE state = 'completed' AND expires_at < $1`, now).Scan(&p.RemainingExpired)
	return p, err
}

// loop runs one batch statement until it deletes fewer than p.Batch rows.
func (e *env) loop(ctx context.Context, p *Purge, expected int, step func(ctx context.Context) (int64, error)) error {
	t, err := e.newPurgeTimer(ctx, p, expected)
	if err != nil {
		return err
	}
	for {
		n, err := step(ctx)
		if err != nil {
			return err
		}
		p.Deleted += n
		if n > 0 {
			t.batch(ctx, n)
		}
		if n < int64(p.Batch) {
			break
		}
	}
	return t.finish(ctx)
}

func summarisePurge(p *Purge, durs []time.Duration, counts []int64) {
	p.Batches = len(durs)
	if p.Seconds > 0 {
		p.KeysPerSec = float64(p.Deleted) / p.Seconds
	}
	if len(durs) == 0 {
		return
	}
	p.BatchP50Ms, p.BatchP99Ms, p.BatchMaxMs = pct(durs, 0.5), pct(durs, 0.99), pct(durs, 1)
	tenth := max(1, len(durs)/10)
	rate := func(d []time.Duration, c []int64) float64 {
		var sd time.Duration
		var sc int64
		for i := range d {
			sd += d[i]
			sc += c[i]
		}
		if sd <= 0 {
			return 0
		}
		return float64(sc) / sd.Seconds()
	}
	p.FirstTenthPerSec = rate(durs[:tenth], counts[:tenth])
	p.LastTenthPerSec = rate(durs[len(durs)-tenth:], counts[len(counts)-tenth:])
}

// pct returns the q-quantile of ds in milliseconds (q = 1: the maximum).
func pct(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i].Microseconds()) / 1000
}

// purges sweeps all expired keys once per batch size, and measures the
// tombstones the first sweep left and how fast they are purged in turn.
func (e *env) purges(ctx context.Context) ([]Purge, Size, Purge, error) {
	var out []Purge
	var tomb Size
	for i, b := range e.cfg.SweepBatches {
		if i > 0 {
			if err := e.restore(ctx); err != nil {
				return nil, tomb, Purge{}, err
			}
		}
		p, err := e.sweep(ctx, fmt.Sprintf("jobs.Sweep, SWEEP_BATCH %d", b), b, 0)
		if err != nil {
			return nil, tomb, Purge{}, err
		}
		e.logf("  batch %d: %d keys in %.1fs (%.0f keys/s)", b, p.Deleted, p.Seconds, p.KeysPerSec)
		out = append(out, p)
		if i == 0 {
			if _, err := e.pool.Exec(ctx, `VACUUM ANALYZE idempotency_tombstones`); err != nil {
				return nil, tomb, Purge{}, err
			}
			if tomb, err = tableSize(ctx, e.pool, "idempotency_tombstones"); err != nil {
				return nil, tomb, Purge{}, err
			}
		}
	}
	// The older day of tombstones, purged once TOMBSTONE_RETENTION has
	// passed while the new ones stay: jobs.SweepTombstones' loop over
	// idempotency.PurgeTombstones, timed per batch.
	tp := Purge{Name: "idempotency.PurgeTombstones, batch 1000", Batch: 1000}
	pool, err := newPool(ctx, e.url, 2)
	if err != nil {
		return nil, tomb, tp, err
	}
	defer pool.Close()
	before := e.day0
	err = e.loop(ctx, &tp, e.cfg.Records, func(ctx context.Context) (int64, error) {
		return idempotency.PurgeTombstones(ctx, pool, before, tp.Batch)
	})
	return out, tomb, tp, err
}

// riverCleaner deletes the completed jobs the way River's job cleaner does
// (its JobDeleteBefore statement, batch 10,000, River's default), after the
// retention: a second purge stream as large as the keys'.
func (e *env) riverCleaner(ctx context.Context) (Purge, error) {
	p := Purge{Name: "River job cleaner (JobDeleteBefore), batch 10000", Batch: 10_000}
	horizon := time.Now().Add(48 * time.Hour)
	err := e.loop(ctx, &p, e.cfg.Records+e.cfg.Live, func(ctx context.Context) (int64, error) {
		tag, err := e.pool.Exec(ctx, `
			DELETE FROM river_job WHERE id IN (
			    SELECT id FROM river_job
			     WHERE state = 'completed' AND finalized_at < $1
			     ORDER BY id LIMIT $2)`, horizon, p.Batch)
		return tag.RowsAffected(), err
	})
	return p, err
}

// ---------------------------------------------------------------------------
// 4. Load.

// op is one request of a load; it returns its kind and outcome ("202", "error: ...").
type op func(ctx context.Context, rng *mrand.Rand) (kind, outcome string, ok bool)

type loadSpec struct {
	name, target string
	clients      int
	rate         float64         // 0: closed loop
	duration     time.Duration   // fixed length, or the cap when until is set
	until        <-chan struct{} // ends the load when closed
	op           op
	during       string
}

// load runs spec: each client sends at rate/clients per second on a fixed
// schedule (a client that falls behind sends at once and does not catch up).
func (e *env) load(ctx context.Context, spec loadSpec) Load {
	probe := e.probe(ctx)
	type sample struct {
		kind, outcome string
		ok            bool
		d             time.Duration
	}
	results := make([][]sample, spec.clients)
	start := time.Now()
	end := start.Add(spec.duration)
	done := func() bool {
		if ctx.Err() != nil || time.Now().After(end) {
			return true
		}
		if spec.until != nil {
			select {
			case <-spec.until:
				return true
			default:
			}
		}
		return false
	}
	var wg sync.WaitGroup
	for c := range spec.clients {
		wg.Go(func() {
			rng := mrand.New(mrand.NewPCG(uint64(c), uint64(start.UnixNano())))
			var interval time.Duration
			if spec.rate > 0 {
				interval = time.Duration(float64(time.Second) * float64(spec.clients) / spec.rate)
			}
			next := start.Add(time.Duration(rng.Int64N(int64(max(interval, time.Millisecond)))))
			for !done() {
				if interval > 0 {
					if wait := time.Until(next); wait > 0 {
						time.Sleep(wait)
					}
					next = next.Add(interval)
					if now := time.Now(); next.Before(now) {
						next = now
					}
				}
				t := time.Now()
				kind, outcome, ok := spec.op(ctx, rng)
				results[c] = append(results[c], sample{kind, outcome, ok, time.Since(t)})
			}
		})
	}
	wg.Wait()
	l := Load{Name: spec.name, Target: spec.target, Clients: spec.clients, TargetRate: spec.rate,
		Seconds: time.Since(start).Seconds(), Statuses: map[string]int{}, Kinds: map[string]Latency{}, During: spec.during}
	var all []time.Duration
	byKind := map[string][]time.Duration{}
	for _, rs := range results {
		for _, s := range rs {
			all = append(all, s.d)
			byKind[s.kind] = append(byKind[s.kind], s.d)
			l.Statuses[s.kind+" "+s.outcome]++
			if !s.ok {
				l.Errors++
			}
		}
	}
	l.Requests = len(all)
	l.PerSec = float64(l.Requests) / l.Seconds
	l.P50Ms, l.P90Ms, l.P99Ms, l.MaxMs = pct(all, 0.5), pct(all, 0.9), pct(all, 0.99), pct(all, 1)
	for k, ds := range byKind {
		l.Kinds[k] = Latency{Count: len(ds), P50Ms: pct(ds, 0.5), P99Ms: pct(ds, 0.99)}
	}
	l.Host = probe.end(ctx)
	return l
}

// apiOp sends new accepts (expecting 202) and replays of live completed keys
// (expecting a 201 replay), replayShare of them replays.
func (e *env) apiOp(replayShare float64) op {
	return func(ctx context.Context, rng *mrand.Rand) (string, string, bool) {
		if rng.Float64() < replayShare {
			k := e.live[rng.IntN(len(e.live))]
			status, err := e.post(ctx, k.caller, k.key, k.body)
			if err != nil {
				return "replay", "error", false
			}
			return "replay", strconv.Itoa(status), status == http.StatusCreated
		}
		order := loadOrderBase + e.loadSeq.Add(1)
		parcel := parcelFor(order, 1, splitmix(uint64(order)))
		body, _ := json.Marshal(parcel)
		status, err := e.post(ctx, "fulfilment", fmt.Sprintf("label:%d:1:v1", order), body)
		if err != nil {
			return "new", "error", false
		}
		return "new", strconv.Itoa(status), status == http.StatusAccepted
	}
}

// commitOp writes what the accept writes, in one durable transaction.
func (e *env) commitOp(pool *pgxpool.Pool, notify bool) op {
	return func(ctx context.Context, _ *mrand.Rand) (string, string, bool) {
		n := e.benchSeq.Add(1)
		order := int64(900_000_000) + n
		key := fmt.Sprintf("label:%d:1:v1", order)
		rid := "lr_" + ulid.Make().String()
		now := time.Now().UTC()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, created_at, expires_at)
				VALUES ('fulfilment', $1, $2, 1, $3, 'started', $4, $5)`, key, make([]byte, 32), rid, now, now.Add(24*time.Hour)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO label_intents (request_id, caller_id, idem_key, request_hash, fingerprint_version,
				order_id, parcel_no, label_version, payload, carrier_key, created_at)
				VALUES ($1, 'fulfilment', $2, $3, 1, $4, 1, 1, '{}', $5, $6)`, rid, key, make([]byte, 32), order, carrier.DeriveKey("fulfilment", key), now); err != nil {
				return err
			}
			if notify {
				_, err := tx.Exec(ctx, `SELECT pg_notify('label_intents', '')`)
				return err
			}
			return nil
		})
		if err != nil {
			return "commit", "error", false
		}
		return "commit", "ok", true
	}
}

// apiLoads: a steady load without a purge, the same during a purge of all
// expired keys (batch: the first of SweepBatches), and a closed-loop
// saturation run of new accepts.
func (e *env) apiLoads(ctx context.Context, purges *[]Purge) ([]Load, error) {
	var out []Load
	spec := loadSpec{target: "API (httptest, real handlers)", clients: e.cfg.Clients, rate: e.cfg.Rate, op: e.apiOp(0.5)}

	base := spec
	base.name, base.duration = "steady, no purge", e.cfg.LoadSeconds
	out = append(out, e.load(ctx, base))
	e.logf("  baseline: p50 %.1f ms, p99 %.1f ms", out[0].P50Ms, out[0].P99Ms)

	sat := loadSpec{name: "saturation: new accepts, closed loop", target: spec.target, clients: 16, duration: e.cfg.SatSeconds, op: e.apiOp(0)}
	out = append(out, e.load(ctx, sat))

	// The accept's transaction without HTTP: the key record and the intent,
	// durable, with and without the pg_notify the accept sends to wake the
	// relay. NOTIFY takes one lock for the whole server at commit, held
	// through the WAL flush, so notifying commits cannot share a flush.
	pool, err := newPool(ctx, e.url, 16)
	if err != nil {
		return nil, err
	}
	for _, notify := range []bool{false, true} {
		name := "commit: key + intent insert, no NOTIFY"
		if notify {
			name = "commit: key + intent insert + pg_notify (the accept)"
		}
		out = append(out, e.load(ctx, loadSpec{name: name, target: "SQL, one transaction", clients: 16, duration: e.cfg.SatSeconds, op: e.commitOp(pool, notify)}))
	}
	pool.Close()

	if err := e.restore(ctx); err != nil {
		return nil, err
	}
	batch := e.cfg.SweepBatches[0]
	spec.name = "steady, during a purge of all expired keys"
	during, p, err := e.loadDuringSweep(ctx, spec, batch, 0)
	if err != nil {
		return nil, err
	}
	out = append(out, during)
	*purges = append(*purges, p)
	e.logf("  during purge: p50 %.1f ms, p99 %.1f ms; purge %.0f keys/s", during.P50Ms, during.P99Ms, p.KeysPerSec)

	// One run of the periodic sweeper at the seed's peak: SWEEP_INTERVAL 1m
	// of 2,000 completions a second is 120,000 keys.
	if err := e.restore(ctx); err != nil {
		return nil, err
	}
	keys := min(SeedPeakPerMinute, e.cfg.Records/2)
	spec.name = fmt.Sprintf("steady, during one sweeper run (%d keys)", keys)
	during, p, err = e.loadDuringSweep(ctx, spec, batch, keys)
	if err != nil {
		return nil, err
	}
	out = append(out, during)
	*purges = append(*purges, p)
	e.logf("  during one sweeper run: p50 %.1f ms, p99 %.1f ms; purge %.0f keys/s", during.P50Ms, during.P99Ms, p.KeysPerSec)
	return out, nil
}

// loadDuringSweep runs spec from one second before a sweep of the expired
// keys (all, or the first keys) until one second after it ends (at most MaxLoad).
func (e *env) loadDuringSweep(ctx context.Context, spec loadSpec, batch, keys int) (Load, Purge, error) {
	stop := make(chan struct{})
	spec.until, spec.duration = stop, e.cfg.MaxLoad
	n := e.cfg.Records
	if keys > 0 && keys < n {
		n = keys
	}
	spec.during = fmt.Sprintf("jobs.Sweep of %d expired keys, SWEEP_BATCH %d", n, batch)
	var l Load
	var wg sync.WaitGroup
	wg.Go(func() { l = e.load(ctx, spec) })
	time.Sleep(time.Second)
	p, err := e.sweep(ctx, fmt.Sprintf("jobs.Sweep of %d keys, SWEEP_BATCH %d, under load", n, batch), batch, keys)
	p.UnderLoad = true
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	return l, p, err
}

// ---------------------------------------------------------------------------
// 5. Partitions.

const partSchema = "capacity_part"

// partitionedInsert is idempotency.Insert's statement on the partitioned
// table. ON CONFLICT cannot name (caller_id, idem_key): no unique index has
// exactly those columns, so the only arbiter is the primary key, which
// includes expires_at.
const partitionedInsert = `
	WITH ins AS (
		INSERT INTO capacity_part.idempotency_keys
		       (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, 'started', $6, $7)
		ON CONFLICT DO NOTHING
		RETURNING 1)
	SELECT EXISTS (SELECT 1 FROM ins),
	       EXISTS (SELECT 1 FROM idempotency_tombstones WHERE caller_id = $1 AND key_hash = sha256(convert_to($2, 'UTF8')))`

const plainInsert = `
	WITH ins AS (
		INSERT INTO idempotency_keys
		       (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, 'started', $6, $7)
		ON CONFLICT (caller_id, idem_key) DO NOTHING
		RETURNING 1)
	SELECT EXISTS (SELECT 1 FROM ins),
	       EXISTS (SELECT 1 FROM idempotency_tombstones WHERE caller_id = $1 AND key_hash = sha256(convert_to($2, 'UTF8')))`

// benchOp is the key-store work of the API without HTTP: half claims of new
// keys (one transaction, the API's insert statement), half look-ups of live
// keys by (caller_id, idem_key), the replay path.
func (e *env) benchOp(pool *pgxpool.Pool, table, insert string) op {
	return func(ctx context.Context, rng *mrand.Rand) (string, string, bool) {
		if rng.IntN(2) == 0 {
			k := e.live[rng.IntN(len(e.live))]
			var state string
			err := pool.QueryRow(ctx, `SELECT state::text FROM `+table+` WHERE caller_id = $1 AND idem_key = $2`, k.caller, k.key).Scan(&state)
			if err != nil {
				return "lookup", "error", false
			}
			return "lookup", state, state == idempotency.StateCompleted
		}
		n := e.benchSeq.Add(1)
		now := time.Now().UTC()
		var inserted, purged bool
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2000ms'`); err != nil {
				return err
			}
			return tx.QueryRow(ctx, insert, "fulfilment", fmt.Sprintf("label:%d:1:v1", 800_000_000+n), make([]byte, 32), 1,
				"lr_"+ulid.Make().String(), now, now.Add(24*time.Hour)).Scan(&inserted, &purged)
		})
		if err != nil {
			return "insert", "error", false
		}
		return "insert", strconv.FormatBool(inserted), inserted
	}
}

func (e *env) partitions(ctx context.Context, sizes []Size) (Partitions, error) {
	r := Partitions{Granularity: "daily, RANGE (expires_at), UTC days"}
	for _, s := range sizes {
		if s.Table == "idempotency_keys" {
			r.PlainSize = s
		}
	}
	parent := partSchema + ".idempotency_keys"
	if _, err := e.pool.Exec(ctx, `CREATE SCHEMA `+partSchema+`;
		CREATE TABLE `+parent+` (LIKE public.idempotency_keys INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (expires_at)`); err != nil {
		return r, err
	}
	// What the schema would want, and what PostgreSQL answers.
	if _, err := e.pool.Exec(ctx, `ALTER TABLE `+parent+` ADD PRIMARY KEY (caller_id, idem_key)`); err != nil {
		r.PKError = err.Error()
	} else {
		return r, errors.New("PRIMARY KEY (caller_id, idem_key) was accepted on a table partitioned by expires_at")
	}
	if _, err := e.pool.Exec(ctx, `ALTER TABLE `+parent+` ADD PRIMARY KEY (caller_id, idem_key, expires_at)`); err != nil {
		return r, err
	}
	for d := range 4 { // yesterday (expired), today, tomorrow, the day after
		from := e.day0.Add(time.Duration(d) * 24 * time.Hour)
		name := fmt.Sprintf("%s.idempotency_keys_p%s", partSchema, from.Format("20060102"))
		if _, err := e.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
			name, parent, from.Format(time.RFC3339), from.Add(24*time.Hour).Format(time.RFC3339))); err != nil {
			return r, err
		}
		r.Parts = append(r.Parts, PartitionInfo{Name: name, From: from.Format(time.RFC3339), To: from.Add(24 * time.Hour).Format(time.RFC3339)})
	}
	start := time.Now()
	if _, err := e.pool.Exec(ctx, `INSERT INTO `+parent+` SELECT * FROM capacity_fill`); err != nil {
		return r, err
	}
	r.FillSeconds = time.Since(start).Seconds()
	if _, err := e.pool.Exec(ctx, `VACUUM ANALYZE `+parent); err != nil {
		return r, err
	}
	var err error
	if r.Size, err = partitionedSize(ctx, e.pool, parent); err != nil {
		return r, err
	}
	for i := range r.Parts {
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+r.Parts[i].Name).Scan(&r.Parts[i].Rows); err != nil {
			return r, err
		}
	}

	if err := e.partitionCorrectness(ctx, &r); err != nil {
		return r, err
	}

	// Latency of the key-store work, both tables, the same statements.
	benchPool, err := newPool(ctx, e.url, 16)
	if err != nil {
		return r, err
	}
	defer benchPool.Close()
	plainOp := e.benchOp(benchPool, "idempotency_keys", plainInsert)
	partOp := e.benchOp(benchPool, parent, partitionedInsert)
	spec := func(name, target string, o op) loadSpec {
		return loadSpec{name: name, target: target, clients: e.cfg.Clients, rate: e.cfg.Rate, duration: e.cfg.LoadSeconds, op: o}
	}
	r.Loads = append(r.Loads, e.load(ctx, spec("plain, no purge", "SQL: claim + look-up", plainOp)))
	r.Loads = append(r.Loads, e.load(ctx, spec("partitioned, no purge", "SQL: claim + look-up", partOp)))

	// The plain table during a keyed purge of the N keys ...
	if err := e.restore(ctx); err != nil {
		return r, err
	}
	nl, p, err := e.loadDuringSweep(ctx, spec("plain, during jobs.Sweep", "SQL: claim + look-up", plainOp), e.cfg.SweepBatches[0], 0)
	if err != nil {
		return r, err
	}
	r.PlainSweep = p
	r.Loads = append(r.Loads, nl)

	// ... and the partitioned table while yesterday's partition is dropped,
	// tombstones first (the sweeper's guarantee), DETACH CONCURRENTLY (no
	// ACCESS EXCLUSIVE lock on the parent), DROP.
	if err := e.restore(ctx); err != nil {
		return r, err
	}
	victim := r.Parts[0].Name
	r.Drop.Partition = victim
	if err := e.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'started') FROM `+victim).Scan(&r.Drop.Deleted, &r.Drop.StartedRows); err != nil {
		return r, err
	}
	stop := make(chan struct{})
	ps := spec("partitioned, during tombstones + DETACH + DROP", "SQL: claim + look-up", partOp)
	ps.until, ps.duration = stop, e.cfg.MaxLoad
	ps.during = "tombstones for, DETACH PARTITION CONCURRENTLY and DROP of " + victim
	var pl Load
	var wg sync.WaitGroup
	wg.Go(func() { pl = e.load(ctx, ps) })
	time.Sleep(time.Second)
	m, err := e.walMark(ctx)
	if err != nil {
		close(stop)
		wg.Wait()
		return r, err
	}
	var dropErr error
	t0 := time.Now()
	_, dropErr = e.pool.Exec(ctx, `INSERT INTO idempotency_tombstones (caller_id, key_hash, purged_at)
		SELECT caller_id, sha256(convert_to(idem_key, 'UTF8')), now() FROM `+victim+` WHERE state = 'completed'
		ON CONFLICT (caller_id, key_hash) DO UPDATE SET purged_at = EXCLUDED.purged_at`)
	t1 := time.Now()
	if dropErr == nil {
		_, dropErr = e.pool.Exec(ctx, `ALTER TABLE `+parent+` DETACH PARTITION `+victim+` CONCURRENTLY`)
	}
	t2 := time.Now()
	if dropErr == nil {
		_, dropErr = e.pool.Exec(ctx, `DROP TABLE `+victim)
	}
	t3 := time.Now()
	// Keep the load one more second, to see the drop's wake.
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if dropErr != nil {
		return r, dropErr
	}
	r.Loads = append(r.Loads, pl)
	r.Drop.TombstoneSeconds = t1.Sub(t0).Seconds()
	r.Drop.DetachSeconds = t2.Sub(t1).Seconds()
	r.Drop.DropSeconds = t3.Sub(t2).Seconds()
	r.Drop.TotalSeconds = t3.Sub(t0).Seconds()
	r.Drop.KeysPerSec = float64(r.Drop.Deleted) / r.Drop.TotalSeconds
	r.Drop.KeysPerSecNoTomb = float64(r.Drop.Deleted) / t3.Sub(t1).Seconds()
	if w, err := e.walSince(ctx, m, 0); err == nil {
		r.Drop.WALBytes = w.Bytes
	}
	r.Adopted, r.Reasons = decidePartitions(e.cfg, &r)
	return r, nil
}

func partitionedSize(ctx context.Context, db *pgxpool.Pool, parent string) (Size, error) {
	s := Size{Table: parent}
	rows, err := db.Query(ctx, `SELECT relid::text FROM pg_partition_tree($1::regclass) WHERE isleaf`, parent)
	if err != nil {
		return s, err
	}
	leaves, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return s, err
	}
	for _, l := range leaves {
		ls, err := tableSize(ctx, db, l)
		if err != nil {
			return s, err
		}
		s.Rows += ls.Rows
		s.HeapBytes += ls.HeapBytes
		s.IndexBytes += ls.IndexBytes
		s.ToastBytes += ls.ToastBytes
		s.TotalBytes += ls.TotalBytes
		s.TupleBytesAvg += ls.TupleBytesAvg * float64(ls.Rows)
	}
	if s.Rows > 0 {
		s.TupleBytesAvg /= float64(s.Rows)
	}
	s.Note = fmt.Sprintf("%d partitions; primary key (caller_id, idem_key, expires_at); no expires_at index (purge drops partitions)", len(leaves))
	s.perRow()
	return s, nil
}

// partitionCorrectness shows, on both tables, what happens to the two
// guarantees the partitioned table touches: one record per (caller, key), and
// a lock on a record that completion moves.
func (e *env) partitionCorrectness(ctx context.Context, r *Partitions) error {
	parent := partSchema + ".idempotency_keys"
	now := time.Now().UTC()
	// 1. The same key claimed twice, a few seconds apart: the API's retry.
	for _, t := range []struct {
		table, insert string
		out           *int
	}{{"idempotency_keys", plainInsert, &r.DuplicateRowsPlain}, {parent, partitionedInsert, &r.DuplicateRowsPartitioned}} {
		for i := range 2 {
			at := now.Add(time.Duration(i) * 3 * time.Second)
			var ins, purged bool
			if err := e.pool.QueryRow(ctx, t.insert, "fulfilment", "label:dup-check:1:v1", make([]byte, 32), 1,
				fmt.Sprintf("lr_dup_%d", i), at, at.Add(24*time.Hour)).Scan(&ins, &purged); err != nil {
				return err
			}
		}
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+t.table+` WHERE caller_id = 'fulfilment' AND idem_key = 'label:dup-check:1:v1'`).Scan(t.out); err != nil {
			return err
		}
	}

	// 2. Completion moves the row when its new expires_at falls on another
	// day (a purchase that retried across midnight). A concurrent Lease
	// (SELECT ... FOR UPDATE) that waited for it then fails on the
	// partitioned table; on the plain one it sees the completed row.
	tomorrowEnd := r.Parts[2].To
	lateAccept, _ := time.Parse(time.RFC3339, tomorrowEnd)
	for _, t := range []struct {
		table string
		out   *string
	}{{"idempotency_keys", &r.ConcurrentLockPlain}, {parent, &r.ConcurrentLockPartition}} {
		key := "label:move-check:1:v1"
		if _, err := e.pool.Exec(ctx, `INSERT INTO `+t.table+` (caller_id, idem_key, request_hash, fingerprint_version, request_id, state,
			locked_until, lease_token, created_at, expires_at)
			VALUES ('fulfilment', $1, $2, 1, 'lr_move', 'started', now() - interval '1 s', gen_random_uuid(), now(), $3)`,
			key, make([]byte, 32), lateAccept.Add(-time.Second)); err != nil {
			return err
		}
		var before string
		if err := e.pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM `+t.table+` WHERE caller_id = 'fulfilment' AND idem_key = $1`, key).Scan(&before); err != nil {
			return err
		}
		a, err := e.pool.Begin(ctx)
		if err != nil {
			return err
		}
		// Transaction A: the worker's Complete, with expires_at on the next day.
		if _, err := a.Exec(ctx, `UPDATE `+t.table+` SET state = 'completed', locked_until = NULL, lease_token = NULL,
			response_status = 201, response_body = '{}'::json, expires_at = $2
			WHERE caller_id = 'fulfilment' AND idem_key = $1 AND state = 'started'`, key, lateAccept.Add(time.Second)); err != nil {
			_ = a.Rollback(ctx)
			return err
		}
		// Transaction B: another attempt's Lease, waiting on A's row lock.
		res := make(chan error, 1)
		go func() {
			res <- pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
					return err
				}
				var st string
				err := tx.QueryRow(ctx, `SELECT state::text FROM `+t.table+` WHERE caller_id = 'fulfilment' AND idem_key = $1 FOR UPDATE`, key).Scan(&st)
				if err == nil {
					*t.out = "waited, then locked the completed row (state " + st + ")"
				}
				return err
			})
		}()
		time.Sleep(300 * time.Millisecond)
		if err := a.Commit(ctx); err != nil {
			return err
		}
		if err := <-res; err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				*t.out = fmt.Sprintf("ERROR %s: %s", pgErr.Code, pgErr.Message)
			} else {
				*t.out = "error: " + err.Error()
			}
		}
		var after string
		if err := e.pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM `+t.table+` WHERE caller_id = 'fulfilment' AND idem_key = $1`, key).Scan(&after); err != nil {
			return err
		}
		if t.table == parent {
			r.MovedFrom, r.MovedTo, r.RowMoved = before, after, before != after
		}
		if _, err := e.pool.Exec(ctx, `DELETE FROM `+t.table+` WHERE caller_id = 'fulfilment' AND idem_key IN ($1, 'label:dup-check:1:v1')`, key); err != nil {
			return err
		}
	}
	return nil
}

// decidePartitions adopts partitions only if they are faster and keep every guarantee.
func decidePartitions(cfg Config, r *Partitions) (bool, []string) {
	var reasons []string
	keeps := true
	if r.DuplicateRowsPartitioned > 1 {
		keeps = false
		reasons = append(reasons, fmt.Sprintf("uniqueness lost: the same (caller_id, idem_key) claimed twice, 3 s apart, left %d rows in the partitioned table (plain: %d); "+
			"the primary key must include expires_at (%q), so ON CONFLICT no longer finds the first claim", r.DuplicateRowsPartitioned, r.DuplicateRowsPlain, r.PKError))
	}
	if r.RowMoved {
		reasons = append(reasons, fmt.Sprintf("completion moves the row when the new expires_at falls on another day (%s -> %s); a Lease waiting on that row got: %s (plain table: %s)",
			r.MovedFrom, r.MovedTo, r.ConcurrentLockPartition, r.ConcurrentLockPlain))
		if strings.HasPrefix(r.ConcurrentLockPartition, "ERROR") {
			keeps = false
		}
	}
	reasons = append(reasons, "a daily partition can only go once its last key expired: keys stay up to 24 h past their retention, the store holds up to two days instead of one")
	if r.Drop.StartedRows > 0 {
		keeps = false
		reasons = append(reasons, fmt.Sprintf("the dropped partition held %d started keys, which the sweeper never purges", r.Drop.StartedRows))
	} else {
		reasons = append(reasons, "dropping a partition drops started keys in it too (an intent still retrying when its accept-time expires_at day ends), which the sweeper never purges: they must be moved out first")
	}
	faster := r.Drop.KeysPerSec > r.PlainSweep.KeysPerSec
	reasons = append(reasons, fmt.Sprintf("purge: %.0f keys/s by tombstones + DETACH + DROP (%.0f keys/s without tombstones) vs %.0f keys/s by jobs.Sweep under the same load",
		r.Drop.KeysPerSec, r.Drop.KeysPerSecNoTomb, r.PlainSweep.KeysPerSec))
	if len(r.Loads) >= 4 {
		reasons = append(reasons, fmt.Sprintf("claim + look-up p99: plain %.1f ms, partitioned %.1f ms without a purge; plain %.1f ms during jobs.Sweep, partitioned %.1f ms during the drop",
			r.Loads[0].P99Ms, r.Loads[1].P99Ms, r.Loads[2].P99Ms, r.Loads[3].P99Ms))
	}
	reasons = append(reasons, fmt.Sprintf("bytes per record: %.0f partitioned vs %.0f plain", r.Size.BytesPerRow, r.PlainSize.BytesPerRow))
	return faster && keeps, reasons
}

// ---------------------------------------------------------------------------
// 6. Scale-out arithmetic.

func scaleOut(rep *Report) ScaleOut {
	s := ScaleOut{PeakCreatesPerSec: 20_000, SeedBytesPerKey: 512}
	s.KeysPerDay = s.PeakCreatesPerSec * 86_400
	s.SeedKeyStoreBytes = s.KeysPerDay * s.SeedBytesPerKey
	size := func(t string) float64 {
		for _, x := range rep.Sizes {
			if x.Table == t {
				return x.BytesPerRow
			}
		}
		return 0
	}
	s.BytesPerKey = size("idempotency_keys")
	s.BytesPerKeyChurned = rep.Churned.BytesPerRow
	s.KeyStoreBytes = s.KeysPerDay * s.BytesPerKey
	s.KeyStoreBytesHigh = s.KeysPerDay * s.BytesPerKeyChurned
	s.TombstoneBytes = s.KeysPerDay * 30 * rep.Tombstones.BytesPerRow
	s.RiverJobBytes = s.KeysPerDay * size("river_job")
	s.IntentLabelPerDay = s.KeysPerDay * (size("label_intents") + size("labels"))
	perKey := func(p Purge) float64 {
		if p.WALPerKey > 0 {
			return p.WALPerKey
		}
		return p.WALRawPerKey
	}
	purgeWAL := 0.0
	if len(rep.Purges) > 0 {
		purgeWAL = perKey(rep.Purges[0])
	}
	s.WALPerLabel = rep.Pipeline.WALPerAccept + rep.Pipeline.WALPerLabel + purgeWAL + perKey(rep.TombstonePurge) + perKey(rep.RiverCleaner)
	noFPI := func(p Purge) float64 {
		if p.WALNoFPIPerKey > 0 {
			return p.WALNoFPIPerKey
		}
		return perKey(p)
	}
	purgeNoFPI := 0.0
	if len(rep.Purges) > 0 {
		purgeNoFPI = noFPI(rep.Purges[0])
	}
	s.WALPerLabelNoFPI = rep.Pipeline.WALPerAcceptNoFPI + rep.Pipeline.WALPerLabelNoFPI + purgeNoFPI + noFPI(rep.TombstonePurge) + noFPI(rep.RiverCleaner)
	s.WALBytesPerSecNoFPI = s.PeakCreatesPerSec * s.WALPerLabelNoFPI
	s.WALBytesPerSec = s.PeakCreatesPerSec * s.WALPerLabel
	s.WALBytesPerDay = s.WALBytesPerSec * 86_400
	s.CommitsPerLabel = rep.Pipeline.CommitsPerAccept + rep.Pipeline.CommitsPerLabel
	s.CommitsPerSec = s.PeakCreatesPerSec * s.CommitsPerLabel
	s.PurgeKeysPerSec = s.PeakCreatesPerSec
	for _, l := range rep.Loads {
		switch {
		case strings.HasPrefix(l.Name, "saturation"):
			s.MeasuredAccepts = l.PerSec
		case strings.HasPrefix(l.Name, "commit:") && strings.Contains(l.Name, "pg_notify"):
			s.CommitsNotify = l.PerSec
		case strings.HasPrefix(l.Name, "commit:"):
			s.CommitsNoNotify = l.PerSec
		}
	}
	s.MeasuredLabels = rep.Pipeline.LabelsPerSec
	if len(rep.Purges) > 0 {
		s.MeasuredPurge = rep.Purges[0].KeysPerSec
	}
	if s.MeasuredAccepts > 0 {
		s.ShardsByAccepts = s.PeakCreatesPerSec / s.MeasuredAccepts
	}
	if s.MeasuredLabels > 0 {
		s.ShardsByLabels = s.PeakCreatesPerSec / s.MeasuredLabels
	}
	return s
}

// ---------------------------------------------------------------------------
// Printing.

func mb(b float64) string {
	switch {
	case b >= 1<<40:
		return fmt.Sprintf("%.2f TiB", b/(1<<40))
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// PrintReport writes the report for people.
func PrintReport(w io.Writer, r *Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	p := func(format string, a ...any) { fmt.Fprintf(tw, format+"\n", a...) }
	m := r.Machine
	p("Capacity of the key store: %s", r.Command)
	p("machine: %d CPUs (%s), %.1f GiB, %s; PostgreSQL %s", m.CPUs, m.CPUModel, m.MemoryGiB, m.GoVersion, m.PostgreSQL)
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range m.Settings {
			if !yield(k) {
				return
			}
		}
	})
	var set []string
	for _, k := range keys {
		set = append(set, k+"="+m.Settings[k])
	}
	p("settings: %s", strings.Join(set, ", "))
	p("run: %.0f s in %s; %d expired + %d live records; fill %.0f rows/s (%s)", r.Seconds, r.Database, r.Records, r.Live, r.Fill.RowsPerSec, r.Fill.Method)
	p("")
	p("1. Bytes per row (after VACUUM ANALYZE)")
	p("table\trows\ttotal\tper row\theap/row\tindexes/row\ttoast/row\tdata/row")
	for _, s := range append(slices.Clone(r.Sizes), r.Churned, r.Tombstones) {
		p("%s\t%d\t%s\t%.0f B\t%.0f B\t%.0f B\t%.1f B\t%.0f B", s.Table, s.Rows, mb(float64(s.TotalBytes)), s.BytesPerRow, s.HeapPerRow, s.IndexPerRow, s.ToastPerRow, s.TupleBytesAvg)
	}
	for _, s := range r.Sizes {
		if s.Table != "idempotency_keys" {
			continue
		}
		for _, ix := range s.Indexes {
			p("  index %s\t\t%s\t%.0f B", ix.Name, mb(float64(ix.Bytes)), ix.PerRow)
		}
	}
	p("seed: 512 B per record")
	p("")
	p("2. Purge")
	p("run\tdeleted\tseconds\tkeys/s\tbatch p50\tbatch p99\tbatch max\tfirst 10%%\tlast 10%%\tWAL/key\twithout FPI\tWAL/key (cluster)")
	purges := append(slices.Clone(r.Purges), r.TombstonePurge, r.RiverCleaner)
	for _, x := range purges {
		p("%s\t%d\t%.1f\t%.0f\t%.1f ms\t%.1f ms\t%.1f ms\t%.0f/s\t%.0f/s\t%.0f B\t%.0f B\t%.0f B",
			x.Name, x.Deleted, x.Seconds, x.KeysPerSec, x.BatchP50Ms, x.BatchP99Ms, x.BatchMaxMs, x.FirstTenthPerSec, x.LastTenthPerSec,
			x.WALPerKey, x.WALNoFPIPerKey, x.WALRawPerKey)
	}
	p("WAL/key: this database's records in three windows of the purge (start, middle, end), read back; cluster: LSN distance over the whole purge, every database")
	for _, x := range purges {
		p("  %s: %s; waits: %s", x.Name, x.Host, x.Host.topWaits(4))
	}
	p("")
	p("3. API latency (%d clients)", r.Loads[0].Clients)
	printLoads(p, r.Loads)
	p("")
	pl := r.Pipeline
	p("4. Whole requests (API -> relay -> River worker -> completion), %d requests", pl.Requests)
	p("accept: %.0f/s (%d clients, closed loop); WAL %.0f B/request, %.0f B without full-page images; %.2f commits/request; filtered to this database: %v",
		pl.AcceptsPerSec, r.Loads[0].Clients, pl.WALPerAccept, pl.WALPerAcceptNoFPI, pl.CommitsPerAccept, pl.AcceptWAL.Filtered)
	p("  %s; waits: %s", pl.AcceptHost, pl.AcceptHost.topWaits(4))
	p("work (dispatch, lease, carrier, complete): %.0f labels/s; WAL %.0f B/label, %.0f B without full-page images; %.2f commits/label; %d succeeded, %d River jobs completed",
		pl.LabelsPerSec, pl.WALPerLabel, pl.WALPerLabelNoFPI, pl.CommitsPerLabel, pl.Succeeded, pl.RiverJobs)
	p("  %s; waits: %s", pl.WorkHost, pl.WorkHost.topWaits(4))
	p("")
	pt := r.Partitions
	p("5. Daily partitions on expires_at")
	p("fill %.1f s; %s; %.0f B/record (plain %.0f B)", pt.FillSeconds, pt.Size.Note, pt.Size.BytesPerRow, pt.PlainSize.BytesPerRow)
	for _, x := range pt.Parts {
		p("  %s\t[%s, %s)\t%d rows", x.Name, x.From, x.To, x.Rows)
	}
	p("PRIMARY KEY (caller_id, idem_key): %s", pt.PKError)
	p("drop %s: %d keys (%d started); tombstones %.2f s, DETACH CONCURRENTLY %.2f s, DROP %.3f s: %.0f keys/s (%.0f without tombstones)",
		pt.Drop.Partition, pt.Drop.Deleted, pt.Drop.StartedRows, pt.Drop.TombstoneSeconds, pt.Drop.DetachSeconds, pt.Drop.DropSeconds, pt.Drop.KeysPerSec, pt.Drop.KeysPerSecNoTomb)
	p("plain jobs.Sweep under the same load: %d keys in %.1f s: %.0f keys/s", pt.PlainSweep.Deleted, pt.PlainSweep.Seconds, pt.PlainSweep.KeysPerSec)
	printLoads(p, pt.Loads)
	p("same key claimed twice: plain %d row(s), partitioned %d row(s)", pt.DuplicateRowsPlain, pt.DuplicateRowsPartitioned)
	p("completion across a day boundary: moved %v (%s -> %s); waiting Lease: partitioned %q, plain %q", pt.RowMoved, pt.MovedFrom, pt.MovedTo, pt.ConcurrentLockPartition, pt.ConcurrentLockPlain)
	p("adopted: %v", pt.Adopted)
	for _, x := range pt.Reasons {
		p("  - %s", x)
	}
	p("")
	s := r.ScaleOut
	p("6. At 10x the seed's peak: %.0f creates/s, %.4g keys/day", s.PeakCreatesPerSec, s.KeysPerDay)
	p("key store (24 h): seed %s at 512 B; measured %s at %.0f B (churned %s at %.0f B)", mb(s.SeedKeyStoreBytes), mb(s.KeyStoreBytes), s.BytesPerKey, mb(s.KeyStoreBytesHigh), s.BytesPerKeyChurned)
	p("tombstones (30 d): %s; River jobs (24 h): %s; intents + labels: %s per day, kept", mb(s.TombstoneBytes), mb(s.RiverJobBytes), mb(s.IntentLabelPerDay))
	p("WAL per label (accept + work + purge + tombstone purge + job cleanup): %.0f B as measured = %s/s, %s/day; without full-page images %.0f B = %s/s",
		s.WALPerLabel, mb(s.WALBytesPerSec), mb(s.WALBytesPerDay), s.WALPerLabelNoFPI, mb(s.WALBytesPerSecNoFPI))
	p("commits: %.2f per label = %.0f/s; purge needed: %.0f keys/s (keys) + as many tombstones and River jobs", s.CommitsPerLabel, s.CommitsPerSec, s.PurgeKeysPerSec)
	p("measured here: %.0f accepts/s through the API, %.0f accept transactions/s with pg_notify, %.0f without; %.0f labels/s; %.0f purged keys/s",
		s.MeasuredAccepts, s.CommitsNotify, s.CommitsNoNotify, s.MeasuredLabels, s.MeasuredPurge)
	p("  -> 10x peak is %.1f x this machine by accepts, %.1f x by labels", s.ShardsByAccepts, s.ShardsByLabels)
}

func printLoads(p func(string, ...any), loads []Load) {
	p("load\ttarget\trate\trequests\tper s\terrors\tp50\tp90\tp99\tmax\tkinds")
	for _, l := range loads {
		rate := "closed loop"
		if l.TargetRate > 0 {
			rate = fmt.Sprintf("%.0f/s", l.TargetRate)
		}
		var kinds []string
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range l.Statuses {
				if !yield(k) {
					return
				}
			}
		}) {
			kinds = append(kinds, fmt.Sprintf("%s:%d", k, l.Statuses[k]))
		}
		p("%s\t%s\t%s\t%d\t%.0f\t%d\t%.1f ms\t%.1f ms\t%.1f ms\t%.1f ms\t%s", l.Name, l.Target, rate, l.Requests, l.PerSec, l.Errors, l.P50Ms, l.P90Ms, l.P99Ms, l.MaxMs, strings.Join(kinds, " "))
	}
	for _, l := range loads {
		p("  %s: %s; waits: %s", l.Name, l.Host, l.Host.topWaits(4))
	}
}

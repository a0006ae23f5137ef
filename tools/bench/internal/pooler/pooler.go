// Package pooler measures what PgBouncer in transaction mode buys a fleet on
// one PostgreSQL server: the server connections that N APIs and M workers
// hold, idle and under load, straight to PostgreSQL and through the pooler,
// the end-to-end throughput of each (same run, one after the other on the
// same fleet), and the largest fleet the server's max_connections serves
// each way. It runs the real binaries (./cmd/api, ./cmd/worker,
// ./cmd/carrier) in a scratch database; `go run ./tools/bench pooler`.
package pooler

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labelkit/labels/internal/devdb"
	"github.com/labelkit/labels/internal/pgbouncer"
	"github.com/labelkit/labels/internal/testutil/proctest"
	"github.com/labelkit/labels/tools/bench/internal/scratch"
	"github.com/labelkit/labels/tools/internal/cmdline"
)

// Fleet is N APIs and M workers.
type Fleet struct{ APIs, Workers int }

func (f Fleet) String() string { return fmt.Sprintf("%dx%d", f.APIs, f.Workers) }

// Config is one measurement.
type Config struct {
	ServerURL string        // DATABASE_URL's server; empty: 127.0.0.1:5432, else a private one
	Fleets    []Fleet       // default 1x1, 2x4, 5x10, 10x20
	Modes     []string      // default direct, pooled, polled
	PoolSize  int           // PgBouncer's default_pool_size (default 20)
	Clients   int           // closed-loop clients of the load (default 32)
	Load      time.Duration // load per fleet and mode (default 10s)
	// Repeat runs each fleet's modes this many times, alternating (default
	// 1): on a shared machine one run of each is noise.
	Repeat int
	BinDir string // prebuilt binaries; empty builds them
	Log    func(format string, args ...any)
}

// The modes of a run.
const (
	Direct = "direct" // DATABASE_URL straight to PostgreSQL
	Pooled = "pooled" // DATABASE_URL through PgBouncer, DATABASE_DIRECT_URL for LISTEN
	Polled = "polled" // through PgBouncer, no direct URL: nothing listens, everything polls
	// Describe is Direct with the pooled runs' statement mode (pgx's
	// cache_describe): what the statement mode alone costs, without the hop.
	Describe = "describe"
)

// Run is one fleet in one mode.
type Run struct {
	Fleet string `json:"fleet"`
	Mode  string `json:"mode"`
	// Idle is the fleet's server connections after every process is
	// healthy, before any request; Peak the most during the load.
	Idle int `json:"idle_connections"`
	Peak int `json:"peak_connections"`
	// Listening is the sessions whose last statement was a LISTEN (the
	// notify listeners and River's, on the direct connection).
	Listening int `json:"listening"`
	// Labels is the labels bought during the load (201 within Prefer:
	// wait), PerSecond their rate; Failed the other answers and errors.
	Labels    int     `json:"labels"`
	PerSecond float64 `json:"labels_per_second"`
	Failed    int     `json:"failed"`
	// Refused counts "too many clients" in the processes' logs.
	Refused int `json:"too_many_clients"`
}

// Report is the whole measurement.
type Report struct {
	When           time.Time `json:"when"`
	MaxConnections int       `json:"max_connections"`
	Reserved       int       `json:"superuser_reserved_connections"`
	PoolSize       int       `json:"pool_size"`
	Clients        int       `json:"clients"`
	LoadSeconds    float64   `json:"load_seconds"`
	Repeat         int       `json:"repeat"`
	Runs           []Run     `json:"runs"`
}

func (c *Config) defaults() {
	if len(c.Modes) == 0 {
		c.Modes = []string{Direct, Pooled, Polled}
	}
	if len(c.Fleets) == 0 {
		c.Fleets = []Fleet{{1, 1}, {2, 4}, {5, 10}, {10, 20}}
	}
	if c.PoolSize <= 0 {
		c.PoolSize = 20
	}
	if c.Repeat <= 0 {
		c.Repeat = 1
	}
	if c.Clients <= 0 {
		c.Clients = 32
	}
	if c.Load <= 0 {
		c.Load = 10 * time.Second
	}
	if c.Log == nil {
		c.Log = func(string, ...any) {}
	}
}

// Measure runs every fleet straight to PostgreSQL and then through
// PgBouncer, in a scratch database dropped at the end.
func Measure(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	server, err := devdb.Ensure(ctx, devdb.Options{URL: cfg.ServerURL, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	const prefix = "labels_pooler_"
	name := scratch.Name(prefix)
	dbURL, err := devdb.EnsureDatabase(ctx, server, name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = scratch.Drop(context.WithoutCancel(ctx), server, name, prefix) }()
	monitor, err := pgxpool.New(ctx, server)
	if err != nil {
		return nil, err
	}
	defer monitor.Close()
	rep := &Report{When: time.Now().UTC(), PoolSize: cfg.PoolSize, Clients: cfg.Clients, LoadSeconds: cfg.Load.Seconds(), Repeat: cfg.Repeat}
	if err := monitor.QueryRow(ctx, `SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int`).
		Scan(&rep.MaxConnections, &rep.Reserved); err != nil {
		return nil, err
	}

	bins, err := cmdline.Binaries(ctx, cfg.BinDir, "", cfg.Log, "./cmd/api", "./cmd/worker", "./cmd/carrier")
	if err != nil {
		return nil, err
	}
	defer func() { _ = bins.Remove() }()
	m := &measurer{cfg: cfg, bins: bins, dbURL: dbURL, db: name, monitor: monitor}
	if _, err := proctest.Run(ctx, bins.Path("api"), &proctest.Opts{Args: []string{"migrate"}, Env: m.env(Direct)}); err != nil {
		return nil, err
	}
	res, err := proctest.Run(ctx, bins.Path("api"), &proctest.Opts{Args: []string{"caller", "add", "bench"}, Env: m.env(Direct)})
	if err != nil {
		return nil, err
	}
	m.token = res.LastLine()
	carrier, err := proctest.Start(context.WithoutCancel(ctx), bins.Path("carrier"), &proctest.Opts{Env: []string{"CARRIER_ADDR=127.0.0.1:0", "SIM_LATENCY=20ms"}})
	if err != nil {
		return nil, err
	}
	defer func() { _ = carrier.Stop(context.Background()) }()
	addr, err := carrier.WaitListening(ctx, "listening")
	if err != nil {
		return nil, err
	}
	m.carrierURL = "http://" + addr

	for _, f := range cfg.Fleets {
		for i := range cfg.Repeat * len(cfg.Modes) {
			mode := cfg.Modes[i%len(cfg.Modes)]
			r, err := m.run(ctx, f, mode)
			if err != nil {
				return rep, fmt.Errorf("fleet %s %s: %w", f, mode, err)
			}
			cfg.Log("fleet %s %s: idle %d (%d listening), peak %d server connections; %d labels, %.1f/s, %d failed, %d refused",
				f, mode, r.Idle, r.Listening, r.Peak, r.Labels, r.PerSecond, r.Failed, r.Refused)
			rep.Runs = append(rep.Runs, *r)
		}
	}
	return rep, nil
}

type measurer struct {
	cfg                  Config
	bins                 *proctest.Binaries
	dbURL, pooledURL, db string
	token, carrierURL    string
	monitor              *pgxpool.Pool
	order                atomic.Int64
}

// env is a process's database settings in mode.
func (m *measurer) env(mode string) []string {
	switch mode {
	case Pooled:
		return []string{"DATABASE_URL=" + m.pooledURL, "DATABASE_DIRECT_URL=" + m.dbURL, "LOG_FORMAT=json"}
	case Polled:
		return []string{"DATABASE_URL=" + m.pooledURL, "DATABASE_POOLED=true", "LOG_FORMAT=json"}
	case Describe:
		return []string{"DATABASE_URL=" + m.dbURL + "&default_query_exec_mode=cache_describe", "LOG_FORMAT=json"}
	}
	return []string{"DATABASE_URL=" + m.dbURL, "LOG_FORMAT=json"}
}

// connections counts the server sessions of the scratch database but the
// monitor's own.
func (m *measurer) connections(ctx context.Context) (int, error) {
	var n int
	err := m.monitor.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, m.db).Scan(&n)
	return n, err
}

func (m *measurer) run(ctx context.Context, f Fleet, mode string) (*Run, error) {
	r := &Run{Fleet: f.String(), Mode: mode}
	if mode == Pooled || mode == Polled {
		// A PgBouncer of the run's own: its server connections are the run's.
		bouncer, err := pgbouncer.Start(ctx, pgbouncer.Options{Server: m.dbURL, PoolSize: m.cfg.PoolSize})
		if err != nil {
			return nil, err
		}
		defer bouncer.Stop()
		m.pooledURL = bouncer.URL(m.dbURL)
	}
	var procs []*proctest.Process
	defer func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(func() {
				sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_ = p.Stop(sctx)
			})
		}
		wg.Wait()
		// The next run starts from a server without this one's sessions.
		for i := 0; i < 50; i++ {
			if n, err := m.connections(context.Background()); err != nil || n == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		for _, p := range procs {
			for _, l := range p.Lines() {
				if strings.Contains(l.Text, "too many clients") {
					r.Refused++
				}
			}
		}
	}()
	start := func(bin, listening string, env []string) (string, error) {
		p, err := proctest.Start(context.WithoutCancel(ctx), m.bins.Path(bin), &proctest.Opts{Env: env, KeepLines: 500})
		if err != nil {
			return "", err
		}
		procs = append(procs, p)
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		addr, err := p.WaitListening(sctx, listening)
		if err == nil {
			err = p.WaitHealthy(sctx, "http://"+addr)
		}
		return "http://" + addr, err
	}
	var apis []string
	for range f.APIs {
		u, err := start("api", "listening", append(m.env(mode), "API_ADDR=127.0.0.1:0"))
		if err != nil {
			return nil, err
		}
		apis = append(apis, u)
	}
	for range f.Workers {
		if _, err := start("worker", "metrics listening", append(m.env(mode), "CARRIER_URL="+m.carrierURL, "METRICS_ADDR=127.0.0.1:0")); err != nil {
			return nil, err
		}
	}
	time.Sleep(2 * time.Second) // River's start-up queries settle
	var err error
	if r.Idle, err = m.connections(ctx); err != nil {
		return nil, err
	}
	if err := m.monitor.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND query ILIKE 'listen%'`, m.db).Scan(&r.Listening); err != nil {
		return nil, err
	}

	lctx, cancel := context.WithTimeout(ctx, m.cfg.Load)
	defer cancel()
	var peak atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for lctx.Err() == nil {
			if n, err := m.connections(ctx); err == nil && int64(n) > peak.Load() {
				peak.Store(int64(n))
			}
			select {
			case <-lctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	var labels, failed atomic.Int64
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: m.cfg.Clients}}
	began := time.Now()
	var wg sync.WaitGroup
	for i := range m.cfg.Clients {
		wg.Go(func() {
			for lctx.Err() == nil {
				n := m.order.Add(1)
				ok := m.buy(ctx, client, apis[(i+int(n))%len(apis)], n)
				if lctx.Err() != nil {
					return // an answer after the window counts for nothing
				}
				if ok {
					labels.Add(1)
				} else {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	<-sampled
	r.Peak = int(peak.Load())
	r.Labels, r.Failed = int(labels.Load()), int(failed.Load())
	r.PerSecond = math.Round(float64(r.Labels)/elapsed.Seconds()*10) / 10
	return r, nil
}

// buy sends one new intent with Prefer: wait=10 and says whether the label
// came back.
func (m *measurer) buy(ctx context.Context, c *http.Client, api string, n int64) bool {
	body := fmt.Sprintf(`{"order_id":%d,"parcel_no":1,"weight_g":500,"service":"ground","ship_to":{"name":"A. Example","line1":"1 Example Street","city":"Exampleton","postal_code":"10115","country":"DE"}}`, 5_000_000+n)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/v1/labels", strings.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+m.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("pooler-bench-%d", n))
	req.Header.Set("Prefer", "wait=10")
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusCreated
}

// Print writes the report as a table: per fleet and mode the server
// connections (the most of the repeats), the labels per second (their
// median) and its ratio to the median of the same fleet's direct runs.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "PostgreSQL max_connections %d (%d reserved); PgBouncer default_pool_size %d; %d clients, %.0f s per run, %d run(s) per fleet and mode\n\n",
		r.MaxConnections, r.Reserved, r.PoolSize, r.Clients, r.LoadSeconds, r.Repeat)
	fmt.Fprintf(w, "| fleet | mode | idle (listening) | peak | labels/s (median; each run) | failed | refused | / direct |\n")
	fmt.Fprintf(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	type key struct{ fleet, mode string }
	var order []key
	agg := map[key]*Run{}
	rates := map[key][]float64{}
	for _, x := range r.Runs {
		k := key{x.Fleet, x.Mode}
		a := agg[k]
		if a == nil {
			a = &Run{Fleet: x.Fleet, Mode: x.Mode}
			agg[k] = a
			order = append(order, k)
		}
		a.Idle, a.Listening, a.Peak = max(a.Idle, x.Idle), max(a.Listening, x.Listening), max(a.Peak, x.Peak)
		a.Failed += x.Failed
		a.Refused += x.Refused
		rates[k] = append(rates[k], x.PerSecond)
	}
	for _, k := range order {
		a := agg[k]
		med := median(rates[k])
		ratio := "-"
		if d := median(rates[key{k.fleet, Direct}]); d > 0 && k.mode != Direct {
			ratio = fmt.Sprintf("%.2f", med/d)
		}
		var each []string
		for _, v := range rates[k] {
			each = append(each, fmt.Sprintf("%.0f", v))
		}
		fmt.Fprintf(w, "| %s | %s | %d (%d) | %d | %.1f (%s) | %d | %d | %s |\n",
			k.fleet, k.mode, a.Idle, a.Listening, a.Peak, med, strings.Join(each, ", "), a.Failed, a.Refused, ratio)
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

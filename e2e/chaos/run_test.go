package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labelkit/labels/internal/fleet"
	"github.com/labelkit/labels/internal/pgbouncer"
	"github.com/labelkit/labels/internal/proc"
	"github.com/labelkit/labels/internal/testutil/failovertest"
)

// run is one chaos run in progress.
type run struct {
	cfg     Config
	began   time.Time
	dir     string // the run's own directory: bin/ (unless Config.BinDir), pg/
	bins    *proc.Binaries
	db      *database
	bouncer *pgbouncer.Bouncer
	fleet   *cluster
	pool    *pgxpool.Pool
	callers []*caller
	intents []*intent
	api     *api
	rec     *recorder
	hooks   *hooks
	fig     *Figures
	repeats *sync.WaitGroup // repeats after the first requests, which may outlive the window
	// bursts[i], closed by the i-th KillWhileAccepting step (accepting
	// counts them), sends its HA.Burst intents; tail, closed after the last
	// step, those of HA.Tail.
	bursts    []chan struct{}
	accepting int
	tail      chan struct{}
	killed    failovertest.Node // the node an HA run killed last
}

// Run starts a fleet on a throwaway PostgreSQL server (the API, cfg.Workers
// workers, the carrier simulator misbehaving in every way it can), sends
// cfg.Intents intents from two callers with repeats while it kills workers,
// the API once and restarts PostgreSQL once, waits for the drain, and checks
// what must hold. The error reports a run that could not be carried out (a
// build or a start that failed); what the checks found is in the Figures,
// whose Violations are empty when everything held.
func Run(ctx context.Context, cfg Config) (*Figures, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := CheckPrerequisites(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &run{cfg: cfg, began: time.Now(), rec: newRecorder(), fig: &Figures{Config: cfg, Answers: map[int]int{}}, tail: make(chan struct{})}
	if cfg.HA != nil {
		for range cfg.HA.bursts() {
			r.bursts = append(r.bursts, make(chan struct{}))
		}
	}
	defer r.cleanup()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	window, err := r.exercise(ctx)
	if err != nil {
		return nil, err
	}
	r.drain(ctx, window)
	r.drainHooks(ctx)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	vctx, vcancel := context.WithTimeout(ctx, verifyTimeout)
	r.verify(vctx)
	r.verifyHooks(vctx)
	if r.cfg.HA != nil {
		r.verifyHA(vctx)
	}
	vcancel()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	r.say("stopping the fleet")
	for _, u := range r.fleet.stop() {
		r.fig.violate("a process did not stop cleanly on SIGTERM: %s", u)
	}
	for _, c := range r.fleet.f.Crashes() {
		r.fig.violate("%s", c)
	}
	r.fig.Elapsed = time.Since(r.began)
	return r.fig, nil
}

func (r *run) say(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, "chaos %6.1fs  %s\n", time.Since(r.began).Seconds(), fmt.Sprintf(format, args...))
}

func (r *run) cleanup() {
	if r.fleet != nil {
		r.fleet.stop()
	}
	if r.pool != nil {
		r.pool.Close()
	}
	if r.bouncer != nil {
		r.bouncer.Stop()
	}
	if r.hooks != nil {
		r.hooks.srv.Close()
	}
	if r.db != nil {
		r.db.shutdown()
	}
	if r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
}

func (r *run) setup(ctx context.Context) error {
	if r.cfg.LogDir != "" {
		if err := os.MkdirAll(r.cfg.LogDir, 0o755); err != nil {
			return err
		}
	}
	// One directory of the run's own holds the binaries and the database, so
	// that nothing else's clean-up of temporary directories can
	// take the binaries away while workers are still being restarted.
	dir, err := os.MkdirTemp("", "labels-chaos-")
	if err != nil {
		return err
	}
	r.dir = dir
	if r.bins, err = fleet.Binaries(ctx, r.cfg.BinDir, filepath.Join(dir, "bin"), r.say, "./cmd/api", "./cmd/worker", "./cmd/carrier"); err != nil {
		return err
	}

	var url string
	if r.cfg.HA != nil {
		url = r.cfg.HA.Formation.CreateDatabase("labels_chaos")
		r.say("the formation's database: %s", url)
	} else {
		r.say("starting a private PostgreSQL server")
		db, err := startDatabase(ctx, dir)
		if err != nil {
			return err
		}
		r.db, url = db, db.URL
		r.say("PostgreSQL on 127.0.0.1:%d (data in %s)", db.port, db.dir)
	}
	if r.pool, err = pgxpool.New(ctx, url); err != nil {
		return err
	}
	r.fleet = newCluster(r.cfg, r.bins, url, r.say)
	if r.cfg.PoolerSize > 0 {
		if r.bouncer, err = pgbouncer.Start(ctx, pgbouncer.Options{Server: url, PoolSize: r.cfg.PoolerSize}); err != nil {
			return err
		}
		r.fleet.pooledURL = r.bouncer.URL(url)
		r.say("PgBouncer on %s in transaction mode, %d server connections", r.bouncer.Addr, r.cfg.PoolerSize)
	}
	if _, err := r.fleet.command(ctx, "api", "migrate"); err != nil {
		return err
	}
	for _, name := range []string{"alpha", "beta"} {
		res, err := r.fleet.command(ctx, "api", "caller", "add", name)
		if err != nil {
			return err
		}
		r.callers = append(r.callers, &caller{name: name, token: res.LastLine()})
	}
	r.hooks = newHooks()
	if err := r.hooks.setup(ctx, r); err != nil {
		return err
	}
	r.say("starting the simulator, %d API and %d workers", r.cfg.APIs, r.cfg.Workers)
	if err := r.fleet.start(ctx); err != nil {
		return err
	}
	r.api = &api{
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}},
		url:  r.fleet.apiURL,
		rec:  r.rec,
	}
	var simConfig json.RawMessage
	if err := r.carrierGet(ctx, "/sim/config", &simConfig); err != nil {
		return err
	}
	r.say("API %s; carrier %s misbehaving as %s", r.fleet.apiURL(), r.fleet.carrierURL, simConfig)
	var env []string
	for _, k := range slices.Sorted(maps.Keys(workerEnv)) {
		env = append(env, k+"="+workerEnv[k])
	}
	r.say("workers: %s", strings.Join(env, " "))
	r.plan()
	return nil
}

// plan draws the intents. They come in pairs, one per caller, for the same
// order and parcel number; two pairs in three use the key derived from the
// parcel (label:ORDER:PARCEL:v1), the same string for both callers, which
// must still be two intents, two labels and two purchases. The others use a
// random key saved with the intent.
func (r *run) plan() {
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), 0xc4a05))
	sendWindow := r.cfg.Duration * 3 / 4
	baseOrder := int64(1_000_000 + rng.IntN(1_000_000))
	for i := range r.cfg.Intents {
		pair := i / 2
		order := baseOrder + int64(pair)
		if i%2 == 0 {
			r.fig.Pairs++
		}
		in := &intent{n: i, caller: r.callers[i%2]}
		parcelNo := 1 + int(uint64(order)*2654435761%3)
		in.parcel = newParcel(rng, order, parcelNo)
		if pair%3 != 2 {
			in.key = fmt.Sprintf("label:%d:%d:v1", order, parcelNo)
			if i%2 == 0 {
				r.fig.SharedKeys++
			}
		} else {
			in.key = fmt.Sprintf("chaos-%016x", rng.Uint64())
		}
		p := plan{
			at:         time.Duration(float64(sendWindow) * float64(i) / float64(r.cfg.Intents)),
			concurrent: 1,
			rng:        rand.New(rand.NewPCG(uint64(r.cfg.Seed), uint64(i))),
		}
		p.at += time.Duration(rng.Int64N(int64(50 * time.Millisecond)))
		switch d := rng.IntN(20); {
		case d < 5:
			p.concurrent = 2
		case d < 8:
			p.concurrent = 3
		}
		if rng.IntN(10) < 3 {
			p.later = 200*time.Millisecond + time.Duration(rng.Int64N(int64(4*time.Second)))
		}
		p.after = rng.IntN(100) < 35
		if ha := r.cfg.HA; ha != nil {
			bursts := r.cfg.Intents - ha.bursts()*ha.Burst
			switch tail := bursts - ha.Tail; {
			case i >= bursts:
				p.gate, p.at = r.bursts[(i-bursts)/ha.Burst], 0
			case i >= tail:
				p.gate, p.at = r.tail, time.Duration(i-tail)*150*time.Millisecond
			default:
				p.until = r.tail
			}
		}
		in.plan = p
		r.intents = append(r.intents, in)
	}
	r.fig.Intents = len(r.intents)
}

// waitForPurchase waits up to a second for a moment when some worker is in
// the middle of a purchase (a buy_label job fetched within the last two
// seconds and still running; older running jobs are a killed worker's,
// waiting for River's rescuer), so that a kill now has a fair chance of
// interrupting one.
func (r *run) waitForPurchase(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for {
		var n int
		err := r.pool.QueryRow(ctx, `SELECT count(*) FROM river_job
			WHERE kind = 'buy_label' AND state = 'running' AND attempted_at > now() - interval '2 seconds'`).Scan(&n)
		if err == nil && n > 0 {
			return
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return
		}
	}
}

// event is one disturbance of the window.
type event struct {
	at   time.Duration
	name string
	do   func(ctx context.Context) error
}

// verifyTimeout bounds the checks after the drain.
const verifyTimeout = 5 * time.Minute

// exercise sends the intents and disturbs the fleet for cfg.Duration. It
// returns when the window is over and every intent's first requests have
// ended (repeats after completion may still be running: they end in drain).
// A disturbance that cannot be carried out (a process that does not start
// again) ends the run with an error: what follows would test nothing.
func (r *run) exercise(ctx context.Context) (windowEnd time.Time, err error) {
	d := r.cfg.Duration
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), 0x6b1))
	var events []event
	if r.cfg.HA != nil {
		events = r.haEvents()
	}
	if r.cfg.KillEvery > 0 && r.cfg.HA == nil {
		for at := r.cfg.KillEvery; at < d; at += r.cfg.KillEvery {
			i := rng.IntN(r.cfg.Workers)
			events = append(events, event{at: at, name: fmt.Sprintf("SIGKILL worker-%d, start a new one", i+1), do: func(ctx context.Context) error {
				r.waitForPurchase(ctx)
				r.fig.WorkerKills++
				return r.fleet.killWorker(ctx, i)
			}})
		}
	}
	if r.cfg.HA == nil {
		events = append(events, r.fleetEvents()...)
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at < events[j].at })

	start := time.Now()
	r.say("sending %d intents over %s while disturbing the fleet", len(r.intents), d*3/4)
	var first, repeats sync.WaitGroup
	r.repeats = &repeats
	for _, in := range r.intents {
		first.Add(1)
		go r.api.runIntent(ctx, in, start, &first, &repeats)
	}
	for _, ev := range events {
		if !sleep(ctx, time.Until(start.Add(ev.at))) {
			return time.Now(), ctx.Err()
		}
		r.say("%s", ev.name)
		if err := ev.do(ctx); err != nil {
			return time.Now(), fmt.Errorf("%s: %w", ev.name, err)
		}
	}
	if r.cfg.HA == nil {
		sleep(ctx, time.Until(start.Add(d))) // an HA run's window ends with its steps
	}
	windowEnd = time.Now()
	r.say("window over: %d worker kills, %d API kill, %d PostgreSQL restart, %d formation steps; waiting for the first requests to end",
		r.fig.WorkerKills, r.fig.APIKills, r.fig.DBRestarts, len(r.fig.HA))
	first.Wait()
	if r.cfg.HA != nil {
		r.dropUnsent()
	}
	return windowEnd, ctx.Err()
}

// fleetEvents are the disturbances of the run on a private server besides
// the worker kills: the API killed once, PostgreSQL restarted once.
func (r *run) fleetEvents() []event {
	d := r.cfg.Duration
	return []event{
		{at: d * 3 / 10, name: "SIGKILL the API, start a new one on its address", do: func(ctx context.Context) error {
			r.fig.APIKills++
			return r.fleet.killAPI(ctx)
		}},
		{at: d * 11 / 20, name: "restart PostgreSQL (fast shutdown, 2 s down)", do: func(ctx context.Context) error {
			r.fig.DBRestarts++
			if err := r.db.stop(ctx); err != nil {
				return err
			}
			sleep(ctx, 2*time.Second)
			return r.db.start(ctx)
		}},
	}
}

package capacity

// Phase 4: the loads. The API's latency without a purge, during one and
// during one sweeper run; its saturation; the accept's transaction alone.

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/tools/bench/internal/scratch"
)

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
	pool, err := scratch.Pool(ctx, e.url, 16, "")
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

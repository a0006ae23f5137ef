package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/labelkit/labels/internal/fleet"
)

// meter starts reading the CPU and the database's counters; the function it
// returns stops and gives what was used meanwhile.
func (h *harness) meter(ctx context.Context) func() (CPU, DB) {
	before := h.cpu.read()
	watch, werr := watchDB(ctx, h.dbURL, h.dbName, 20*time.Millisecond)
	return func() (c CPU, d DB) {
		if werr == nil {
			d = watch.finish(ctx, 0)
		}
		return since(before, h.cpu.read()), d
	}
}

// measured runs the load while it meters the measured window only: from the
// end of the warm-up to the end of the load.
func (h *harness) measured(ctx context.Context, spec loadSpec) LoadRun {
	done := make(chan LoadRun, 1)
	go func() { done <- runLoad(ctx, spec) }()
	select {
	case <-time.After(spec.Warmup):
	case <-ctx.Done():
	}
	stop := h.meter(ctx)
	r := <-done
	r.CPU, r.DB = stop()
	return r
}

// ceilingAndAccept runs, at each concurrency, pgbench's ceiling, the accept
// load with the worker stopped and the accept load with the pipeline live in
// alternating rounds (each from empty tables after a checkpoint), and merges
// the rounds of each.
func (h *harness) ceilingAndAccept(ctx context.Context) error {
	var errs []error
	rounds := h.cfg.Rounds
	slice := time.Duration(math.Ceil(h.cfg.Duration.Seconds()/float64(rounds))) * time.Second
	for _, c := range h.cfg.Concurrency {
		var ceilParts []PgbenchRun
		var accParts, liveParts []LoadRun
		for range rounds {
			for _, ph := range []string{PhaseCeiling, PhaseAccept, PhaseLive} {
				if !h.cfg.has(ph) {
					continue
				}
				if err := cmp.Or(ctx.Err(), h.reset(ctx)); err != nil {
					return err
				}
				switch ph {
				case PhaseCeiling:
					ceilParts = append(ceilParts, h.runPgbench(ctx, c, slice))
				case PhaseAccept:
					accParts = append(accParts, h.measured(ctx, h.acceptSpec("accept", c, slice)))
				case PhaseLive:
					r, err := h.acceptLive(ctx, c, slice)
					if err != nil {
						return fmt.Errorf("accept with the pipeline live, c=%d: %w", c, err)
					}
					liveParts = append(liveParts, r)
				}
			}
		}
		var ceiling *PgbenchRun
		if len(ceilParts) > 0 {
			r := mergePgbench(ceilParts)
			h.res.Ceiling = append(h.res.Ceiling, r)
			ceiling = &h.res.Ceiling[len(h.res.Ceiling)-1]
			if r.Error != "" {
				errs = append(errs, fmt.Errorf("pgbench -c %d: %s", c, r.Error))
			}
			h.logf("  c=%-3d ceiling  %7.0f tps   p50 %6.2f ms  p99 %6.2f ms   pg %.2f cores, pgbench %.2f", c, r.TPS, r.Latency.P50, r.Latency.P99, r.CPU.Postgres, r.CPU.Pgbench)
		}
		if len(accParts) > 0 {
			r, err := mergeAccept("accept", c, accParts, ceiling)
			h.res.Accept = append(h.res.Accept, r)
			errs = append(errs, err)
			h.logf("  c=%-3d accept   %7.0f req/s p50 %6.2f ms  p99 %6.2f ms   ratio %.2f   client %.2f, api %.2f, pg %.2f cores; %s", c, r.PerSec, r.Latency.P50, r.Latency.P99, r.RatioToCeiling, r.CPU.Client, r.CPU.API, r.CPU.Postgres, waitsLine(r.DB, 2))
		}
		if len(liveParts) > 0 {
			r, err := mergeAccept("accept with the pipeline live", c, liveParts, ceiling)
			h.res.AcceptLive = append(h.res.AcceptLive, r)
			errs = append(errs, err)
			h.logf("  c=%-3d live     %7.0f req/s p50 %6.2f ms  p99 %6.2f ms   ratio %.2f (p99 %.2f of pgbench's); %.0f final/s; api %.2f, worker %.2f, sim %.2f, pg %.2f cores; %s", c, r.PerSec, r.Latency.P50, r.Latency.P99, r.RatioToCeiling, r.P99ToCeiling, r.DrainedPerSec, r.CPU.API, r.CPU.Worker, r.CPU.Carrier, r.CPU.Postgres, waitsLine(r.DB, 2))
		}
	}
	return errors.Join(errs...)
}

// acceptSpec is the accept load at concurrency c for d.
func (h *harness) acceptSpec(name string, c int, d time.Duration) loadSpec {
	return loadSpec{Name: name, BaseURL: h.apiURL, Token: h.token, Concurrency: c,
		Warmup: h.cfg.Warmup, Duration: d, RepeatShare: h.cfg.RepeatShare, NextOrder: &h.orders}
}

// mergeAccept merges the rounds of one accept load at concurrency c and
// holds the result to the ceiling there (throughput and p99); the error, nil
// when every request was answered, names the load by name.
func mergeAccept(name string, c int, parts []LoadRun, ceiling *PgbenchRun) (LoadRun, error) {
	r := mergeLoads(parts)
	if ceiling != nil && ceiling.TPS > 0 {
		r.RatioToCeiling = round3(r.PerSec / ceiling.TPS)
	}
	if ceiling != nil && ceiling.Latency.P99 > 0 {
		r.P99ToCeiling = round3(r.Latency.P99 / ceiling.Latency.P99)
	}
	if r.Errors > 0 {
		return r, fmt.Errorf("%s c=%d: %d errors, first: %s", name, c, r.Errors, r.FirstError)
	}
	return r, nil
}

// acceptLive runs the accept load at concurrency c for d with a worker and
// the simulator running (started before the warm-up, so the relay and River
// are polling when it begins), and counts the intents they made final
// meanwhile. They stop after it: the next ceiling round's rows are not
// theirs to dispatch.
func (h *harness) acceptLive(ctx context.Context, c int, d time.Duration) (LoadRun, error) {
	pl, err := h.startPipeline(ctx, 0)
	if err != nil {
		return LoadRun{}, err
	}
	defer func() { _ = h.stopPipeline(pl) }()
	began := time.Now()
	r := h.measured(ctx, h.acceptSpec("accept, pipeline live", c, d))
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM label_intents WHERE status <> 'pending'`).Scan(&r.Drained); err != nil {
		return r, err
	}
	if secs := time.Since(began).Seconds(); secs > 0 {
		r.DrainedPerSec = round1(float64(r.Drained) / secs)
	}
	return r, h.stopPipeline(pl)
}

// pipeline is a worker and the simulator it buys from.
type pipeline struct {
	worker, carrier *fleet.Proc
}

// startPipeline starts the simulator at latency lat and a worker buying from
// it, waits until the worker has started, and meters both.
func (h *harness) startPipeline(ctx context.Context, lat time.Duration) (*pipeline, error) {
	carrier, err := h.start(ctx, "carrier", map[string]string{"SIM_LATENCY": lat.String()})
	if err != nil {
		return nil, err
	}
	pl := &pipeline{carrier: carrier}
	pl.worker, err = h.start(ctx, "worker", map[string]string{"WORKER_CONCURRENCY": strconv.Itoa(h.cfg.WorkerConcurrency)})
	if err != nil {
		_ = h.stopPipeline(pl)
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	_, err = pl.worker.WaitMsg(wctx, "worker started")
	cancel()
	if err != nil {
		_ = h.stopPipeline(pl)
		return nil, err
	}
	h.cpu.worker, h.cpu.carrier = pl.worker.Pid(), pl.carrier.Pid()
	return pl, nil
}

// stopPipeline stops the worker (it finishes the jobs it runs), then the
// simulator; a second call does nothing.
func (h *harness) stopPipeline(pl *pipeline) error {
	if pl == nil {
		return nil
	}
	h.cpu.worker, h.cpu.carrier = 0, 0
	err := h.fleet.Stop(context.Background(), pl.worker, pl.carrier).Err()
	pl.worker, pl.carrier = nil, nil
	return err
}

// endToEnd sends a fixed number of creates through api, worker and simulator
// at each simulator latency and times each from created_at to completed_at.
func (h *harness) endToEnd(ctx context.Context) error {
	var errs []error
	for _, lat := range h.cfg.SimLatencies {
		r, err := h.endToEndAt(ctx, lat)
		if err != nil {
			r.Error = err.Error()
			errs = append(errs, fmt.Errorf("simulator latency %s: %w", lat, err))
		}
		h.res.EndToEnd = append(h.res.EndToEnd, r)
		h.logf("  sim %-5s  %d creates: %.0f/s to final, ratio %.2f; 202→final p50 %.0f ms, p99 %.0f ms; %.0f µs machine CPU a label; replays right after: p99 / p50 %.1f, p99 / SELECT p99 %.1f",
			lat, r.Creates, r.CreatesPerSec, r.RatioToCeiling, r.ToFinal.P50, r.ToFinal.P99, r.CPUPerLabel.Machine, r.ReplayP99OverP50, r.ReplayP99OverSelectP99)
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

func (h *harness) endToEndAt(ctx context.Context, lat time.Duration) (E2ERun, error) {
	r := E2ERun{SimLatencyMs: float64(lat.Milliseconds()), Creates: h.cfg.E2ECreates, Concurrency: h.cfg.E2EConcurrency}
	// The ceiling this run is held to is measured right before it and right
	// after it, at its concurrency, as the accept's ceiling alternates with
	// the accept: a shared machine's speed drifts over a run (the ceiling
	// phase's own rounds can differ by a third to a half within minutes), so
	// a ceiling from minutes earlier would make the end-to-end ratio move
	// with it.
	if h.pgbench != "" {
		c, err := h.e2eCeiling(ctx, r.Concurrency, "before")
		if err != nil {
			return r, err
		}
		r.Ceiling = c
		h.logf("  sim %-5s  ceiling right before: %.0f tps at concurrency %d", lat, c.TPS, c.Concurrency)
	}
	t, lo, hi, pl, err := h.drive(ctx, lat, loadSpec{Name: "e2e submit", Concurrency: h.cfg.E2EConcurrency, Count: int64(h.cfg.E2ECreates)})
	defer func() { _ = h.stopPipeline(pl) }()
	r.Through = t
	if err != nil {
		return r, err
	}
	var replayErr error
	if r.Pending == 0 && ctx.Err() == nil {
		// Right after the burst is final, before anything else reads the
		// database.
		replayErr = h.burstReplays(ctx, &r, lo, hi)
	}
	if err := h.settle(ctx, &r.Through, lo, hi); err != nil {
		return r, err
	}
	if r.Ceiling != nil {
		// The pipeline has drained (every intent is final). The worker and
		// the simulator stop first, as they were not running before the run
		// either: the worker's relay would dispatch pgbench's intents.
		if err := h.stopPipeline(pl); err != nil {
			return r, err
		}
		c, err := h.e2eCeiling(ctx, r.Concurrency, "after")
		if err != nil {
			return r, err
		}
		r.CeilingAfter = c
		r.CeilingConcurrency = r.Ceiling.Concurrency
		r.CeilingTPS = round1((r.Ceiling.TPS + r.CeilingAfter.TPS) / 2)
		if r.CeilingTPS > 0 {
			r.RatioToCeiling = round3(r.CreatesPerSec / r.CeilingTPS)
		}
	}
	return r, errors.Join(r.problem(), replayErr)
}

// drive empties the tables, starts the pipeline with the simulator at lat,
// sends spec's creates, waits until every one is final and meters it all:
// the CPU and the database's counters from the first create to the last
// final. It leaves the pipeline running (pl) for the caller to stop; lo and
// hi are the order ids of the creates.
func (h *harness) drive(ctx context.Context, lat time.Duration, spec loadSpec) (t Through, lo, hi int64, pl *pipeline, err error) {
	if err = h.reset(ctx); err != nil {
		return
	}
	if pl, err = h.startPipeline(ctx, lat); err != nil {
		return
	}
	lo = h.orders.Load() + 1
	if spec.Rate > 0 {
		// A paced load needs a fraction of a core (at 2,000/s a sixth): on
		// one P the harness's goroutines hand work to each other without
		// waking a second thread for each request, which would be
		// measurement, not service, in the machine's CPU a label.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	t.before = h.cpu.read()
	var polls int64 // the harness's own transactions below, not counted as the pipeline's
	// A paced phase's waits are in no figure: its sampler reads once a second.
	if watch, werr := watchDB(ctx, h.dbURL, h.dbName, map[bool]time.Duration{false: 20 * time.Millisecond, true: time.Second}[spec.Rate > 0]); werr == nil {
		defer func() { t.DB = watch.finish(ctx, polls) }()
	}
	spec.BaseURL, spec.Token, spec.NextOrder = h.apiURL, h.token, &h.orders
	t.Submit = runLoad(ctx, spec)
	hi = h.orders.Load()
	// Wait until every intent of the run is final, reading the database
	// (cheaper than polling the API) through the small partial index of
	// pending intents, so that the wait costs the machine little while the
	// pipeline drains.
	deadline := time.Now().Add(time.Minute + time.Duration(hi-lo+1)*20*time.Millisecond)
	for {
		polls++
		err = h.pool.QueryRow(ctx, `
			SELECT count(*) FROM label_intents WHERE status = 'pending' AND order_id BETWEEN $1 AND $2`, lo, hi).Scan(&t.Pending)
		if err != nil || t.Pending == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.after = h.cpu.read()
	t.CPU = since(t.before, t.after)
	return
}

// burstReplays replays random keys of the burst [lo, hi] right after it is
// final, closed loop, then has pgbench read as many key records by primary
// key at the same concurrency, and relates the replays' p99 to their p50 and
// to that read's p99.
func (h *harness) burstReplays(ctx context.Context, r *E2ERun, lo, hi int64) error {
	n, c := h.cfg.BurstReplays, h.cfg.BurstConcurrency
	load := h.measured(ctx, loadSpec{Name: "replay after the burst", BaseURL: h.apiURL, Token: h.token, Concurrency: c,
		NextOrder: &h.orders, ReplayFrom: lo, ReplayN: hi - lo + 1, Count: int64(n)})
	r.ReplaysAfter = &load
	if load.Latency.P50 > 0 {
		r.ReplayP99OverP50 = round2(load.Latency.P99 / load.Latency.P50)
	}
	if load.Errors > 0 {
		return fmt.Errorf("replays after the burst: %d errors, first: %s", load.Errors, load.FirstError)
	}
	if h.pgbench == "" {
		return nil
	}
	sel := h.pgbenchRun(ctx, pgbenchSpec{Script: selectScriptFor(lo, hi), Concurrency: c, PerClient: (n + c - 1) / c})
	sel.lat = nil
	r.SelectAfter = &sel
	if sel.Error != "" {
		return fmt.Errorf("the primary-key read after the burst: %s", sel.Error)
	}
	if sel.Latency.P99 > 0 {
		r.ReplayP99OverSelectP99 = round2(load.Latency.P99 / sel.Latency.P99)
	}
	return nil
}

// e2eCeiling runs pgbench at concurrency for a third of a load's duration (at
// least 3 s), before or after an end-to-end run.
func (h *harness) e2eCeiling(ctx context.Context, concurrency int, when string) (*PgbenchRun, error) {
	c := h.runPgbench(ctx, concurrency, max(3*time.Second, h.cfg.Duration/3))
	if c.Error != "" {
		return nil, fmt.Errorf("the ceiling %s the run: %s", when, c.Error)
	}
	c.lat = nil
	return &c, nil
}

// replays fills the store to each size and replays random filled keys.
func (h *harness) replays(ctx context.Context) error {
	if err := h.reset(ctx); err != nil {
		return err
	}
	h.filled = 0
	var errs []error
	for _, n := range h.cfg.ReplaySizes {
		r := ReplayRun{Keys: n}
		began := time.Now()
		err := h.fill(ctx, n)
		took := time.Since(began)
		r.FillSeconds = round1(took.Seconds())
		if took > 0 {
			r.FillPerSec = round1(float64(n) / took.Seconds())
		}
		if err != nil {
			r.Error = err.Error()
			h.res.Replays = append(h.res.Replays, r)
			errs = append(errs, fmt.Errorf("filling %d keys: %w", n, err))
			break
		}
		for _, l := range []struct {
			run  *LoadRun
			name string
			rate float64
		}{{&r.Load, "replay", 0}, {&r.Paced, "replay (paced)", h.cfg.ReplayRate}} {
			*l.run = h.measured(ctx, loadSpec{Name: l.name, BaseURL: h.apiURL, Token: h.token, Concurrency: h.cfg.ReplayConcurrency,
				Warmup: h.cfg.Warmup, Duration: h.cfg.Duration, ReplayFrom: replayBase, ReplayN: int64(n), Rate: l.rate})
			if l.run.Errors > 0 {
				errs = append(errs, fmt.Errorf("%s with %d keys: %d errors, first: %s", l.name, n, l.run.Errors, l.run.FirstError))
			}
		}
		h.res.Replays = append(h.res.Replays, r)
		h.logf("  %9d keys (filled in %s): %6.0f replays/s back to back (p50 %5.2f ms, p99 %6.2f ms); at %.0f/s p50 %5.2f ms, p99 %5.2f ms, %.2f cores stolen by the host",
			n, took.Round(time.Second), r.Load.PerSec, r.Load.Latency.P50, r.Load.Latency.P99, h.cfg.ReplayRate, r.Paced.Latency.P50, r.Paced.Latency.P99, r.Paced.CPU.Steal)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

// store measures the key record's size at the largest fill and the purge rate.
func (h *harness) store(ctx context.Context) error {
	want := slices.Max(h.cfg.ReplaySizes)
	if h.filled < want {
		if h.filled == 0 {
			if err := h.reset(ctx); err != nil {
				return err
			}
		}
		if err := h.fill(ctx, want); err != nil {
			return err
		}
	}
	s, err := h.sizes(ctx)
	if err != nil {
		return err
	}
	h.res.Store = s
	h.logf("  %d key records: %.0f bytes each (heap %.0f, indexes %.0f, TOAST %.0f)", s.Rows, s.BytesPerRecord, s.HeapPerRecord, s.IndexPerRecord, s.ToastPerRecord)
	s.Purge = h.purge(ctx)
	h.logf("  purge: %d keys in %.1f s, %.0f keys/s (batch %d: p50 %.1f ms, p99 %.1f ms)", s.Purge.Deleted, s.Purge.Seconds, s.Purge.KeysPerSec, s.Purge.Batch, s.Purge.BatchP50Ms, s.Purge.BatchP99Ms)
	if s.Purge.Error != "" {
		return errors.New(s.Purge.Error)
	}
	return nil
}

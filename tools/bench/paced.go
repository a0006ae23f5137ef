package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// peakRate is the design's peak create rate: a paced phase's achieved rate
// is given as a share of it.
const peakRate = 2000

// pacedLatency is the simulator's latency in the paced phases.
const pacedLatency = 50 * time.Millisecond

// pacedClients is the clients of a paced phase, its own and pgbench's: enough
// for 100 ms of creates in flight (at least 16). A scheduled start that finds
// none free is taken up late, and the lateness is in its latency.
func pacedClients(rate float64) int { return max(16, int(math.Ceil(rate/10))) }

// paced runs a paced phase at each rate.
func (h *harness) paced(ctx context.Context) error {
	var errs []error
	for _, rate := range h.cfg.PacedRates {
		r, err := h.pacedAt(ctx, rate)
		if err != nil {
			r.Error = err.Error()
			errs = append(errs, fmt.Errorf("%g/s: %w", rate, err))
		}
		h.res.Paced = append(h.res.Paced, r)
		if pg := r.Pgbench; err == nil {
			h.logf("  %5g/s  %.0f creates/s answered (%.2f of %d/s), start late p99 %.1f ms; 202 p50 %.2f ms, p99 %.2f ms (pgbench %.0f tps, p50 %.2f ms, p99 %.2f ms); to final p50 %.0f ms, p99 %.0f ms; %.0f µs machine CPU a label, %.2f commits, %.2f WAL flushes",
				rate, r.Submit.PerSec, r.ShareOfPeak, peakRate, r.Submit.StartLateness.P99, r.Submit.Latency.P50, r.Submit.Latency.P99, pg.TPS, pg.Latency.P50, pg.Latency.P99,
				r.ToFinal.P50, r.ToFinal.P99, r.CPUPerLabel.Machine, r.CommitsPerLabel, r.WALFlushesPerLabel)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// pacedAt runs pgbench's ceiling transaction paced at rate, then the creates
// paced at rate through the whole pipeline, each for the phase's duration
// from empty tables.
func (h *harness) pacedAt(ctx context.Context, rate float64) (PacedRun, error) {
	d := h.cfg.PacedDuration
	r := PacedRun{Rate: rate, SimLatencyMs: float64(pacedLatency.Milliseconds()), Clients: pacedClients(rate), Scheduled: int(rate * d.Seconds())}
	if err := h.reset(ctx); err != nil {
		return r, err
	}
	pg := h.pgbenchRun(ctx, pgbenchSpec{Script: ceilingScript, Concurrency: r.Clients, Duration: d, Rate: rate})
	pg.lat = nil
	r.Pgbench, r.PgbenchCPUPerTx = &pg, cpuPerTx(&pg)
	if pg.Error != "" {
		return r, fmt.Errorf("pgbench -R %g: %s", rate, pg.Error)
	}
	t, lo, hi, pl, err := h.drive(ctx, pacedLatency, loadSpec{Name: fmt.Sprintf("paced at %g/s", rate), Concurrency: r.Clients,
		Duration: d, Rate: rate, Poisson: true})
	defer func() { _ = h.stopPipeline(pl) }()
	r.Through = t
	if err != nil {
		return r, err
	}
	if err := h.settle(ctx, &r.Through, lo, hi); err != nil {
		return r, err
	}
	r.ShareOfPeak = round3(r.Submit.PerSec / peakRate)
	return r, errors.Join(r.problem(), h.stopPipeline(pl))
}

// settle reads the outcome of the creates lo to hi from the database: how
// many succeeded and failed, each one's time to final, the rate they became
// final at, and what each cost.
func (h *harness) settle(ctx context.Context, t *Through, lo, hi int64) error {
	var lats []int64
	var first, last *time.Time
	if err := h.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'failed'),
		       coalesce(array_agg((extract(epoch FROM completed_at - created_at) * 1e9)::bigint) FILTER (WHERE completed_at IS NOT NULL), '{}'),
		       min(created_at) FILTER (WHERE completed_at IS NOT NULL), max(completed_at)
		  FROM label_intents WHERE order_id BETWEEN $1 AND $2`, lo, hi).Scan(&t.Succeeded, &t.Failed, &lats, &first, &last); err != nil {
		return err
	}
	labels := t.Succeeded + t.Failed
	t.CPUPerLabel = perLabel(t.before, t.after, labels)
	if labels > 0 {
		t.CommitsPerLabel = round2(float64(t.DB.Commits) / float64(labels))
		t.WALFlushesPerLabel = round2(float64(t.DB.WALSyncs) / float64(labels))
	}
	t.ToFinal = summarize(lats)
	if first != nil && last != nil && last.After(*first) {
		secs := last.Sub(*first).Seconds()
		t.Seconds = round2(secs)
		t.CreatesPerSec = round1(float64(len(lats)) / secs)
	}
	return nil
}

// problem says what went wrong with the creates, or nil.
func (t *Through) problem() error {
	switch {
	case t.Submit.Errors > 0:
		return fmt.Errorf("%d submissions failed, first: %s", t.Submit.Errors, t.Submit.FirstError)
	case t.Pending > 0:
		return fmt.Errorf("%d intents still pending at the deadline", t.Pending)
	case t.Failed > 0:
		return fmt.Errorf("%d intents failed", t.Failed)
	}
	return nil
}

package capacity

// Phase 3: the purges. jobs.Sweep over every expired key at each batch
// size, the tombstones it leaves and their purge, and River's job cleaner.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/tools/bench/internal/scratch"
)

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
	pool, err := scratch.Pool(ctx, e.url, 2, "")
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
	p.Deleted, err = jobs.SweepAsOf(ctx, pool, now, batch, func(n int64) { t.batch(ctx, n) })
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
	// postgres.PurgeTombstones, timed per batch.
	tp := Purge{Name: "postgres.PurgeTombstones, batch 1000", Batch: 1000}
	pool, err := scratch.Pool(ctx, e.url, 2, "")
	if err != nil {
		return nil, tomb, tp, err
	}
	defer pool.Close()
	err = e.loop(ctx, &tp, e.cfg.Records, func(ctx context.Context) (int64, error) {
		// The retention that puts the database's horizon at day0.
		return postgres.PurgeTombstones(ctx, pool, time.Since(e.day0), tp.Batch)
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

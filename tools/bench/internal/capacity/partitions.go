package capacity

// Phase 5: daily partitions on expires_at, against the plain table.

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/tools/bench/internal/scratch"
)

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
			return "lookup", state, state == postgres.StateCompleted
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
	benchPool, err := scratch.Pool(ctx, e.url, 16, "")
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

package postgres

import (
	"context"
	"encoding/json"
	"time"
)

// StoreStats are the figures of the store gauges (metrics.StoreCollector),
// read at scrape time.
type StoreStats struct {
	Pending int64 // intents not yet final
	// PendingByAge counts them by age: under 1 minute, 1 to 10 minutes, 10
	// minutes to 1 hour, over 1 hour.
	PendingByAge  [4]int64
	OldestPending time.Duration // age of the oldest intent not yet final (0: none)
	OutboxLag     time.Duration // age of the oldest intent the relay has not dispatched (0: none)
	// Jobs counts River's jobs by queue and state, completed, discarded and
	// cancelled left out, zeros included (every other state of every queue
	// River knows or a job is in); those read before an error when river_job
	// could not be read.
	Jobs []JobCount
	// LastRun is the latest reconciliation run; nil when there is none or
	// it could not be read (reconcile_runs is package reconcile's).
	LastRun *ReconcileRunCounts
}

// JobCount is the number of River's jobs in one queue and state.
type JobCount struct {
	Queue, State string
	N            int64
}

// ReconcileRunCounts are the counts of one reconciliation run, by category.
type ReconcileRunCounts struct {
	FinishedAt time.Time
	Counts     map[string]float64
}

// sqlPendingStats counts the pending intents, by age too, and reads the age
// of the oldest and the outbox lag. The counts use the partial index on
// pending intents, the lag the first entry of the relay's queue: both stay
// small while the pipeline flows.
const sqlPendingStats = `
WITH p AS (SELECT count(*) AS n,
                  coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest,
                  count(*) FILTER (WHERE created_at > now() - interval '1 minute'),
                  count(*) FILTER (WHERE created_at <= now() - interval '1 minute' AND created_at > now() - interval '10 minutes'),
                  count(*) FILTER (WHERE created_at <= now() - interval '10 minutes' AND created_at > now() - interval '1 hour'),
                  count(*) FILTER (WHERE created_at <= now() - interval '1 hour')
             FROM label_intents WHERE status = 'pending')
SELECT p.*,
       coalesce((SELECT extract(epoch FROM now() - min(created_at)) FROM label_intent_outbox), 0)::float8
  FROM p`

// GetStoreStats reads the store gauges. Its error is the pending intents'
// read; River's jobs and the latest run are left out when they cannot be
// read.
func GetStoreStats(ctx context.Context, db DB) (StoreStats, error) {
	var s StoreStats
	var oldest, lag float64
	err := db.QueryRow(ctx, sqlPendingStats).Scan(&s.Pending, &oldest,
		&s.PendingByAge[0], &s.PendingByAge[1], &s.PendingByAge[2], &s.PendingByAge[3], &lag)
	if err != nil {
		return StoreStats{}, err
	}
	s.OldestPending, s.OutboxLag = seconds(oldest), seconds(lag)
	s.Jobs = riverJobCounts(ctx, db)
	s.LastRun = lastReconcileRun(ctx, db)
	return s, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// sqlRiverJobCounts counts River's unfinished jobs by queue and state, with
// a zero for every state of every queue that has none: a queue is River's
// (river_queue: the queues a running client works) or one an unfinished job
// is in, the states are river_job_state's but the finished ones. A gauge
// therefore reads 0 when its jobs are done instead of disappearing.
const sqlRiverJobCounts = `
WITH unfinished AS (
  SELECT queue, state::text AS state, count(*) AS n FROM river_job
   WHERE state NOT IN ('completed', 'discarded', 'cancelled') GROUP BY queue, state),
queues AS (SELECT name AS queue FROM river_queue UNION SELECT queue FROM unfinished),
states AS (
  SELECT s::text AS state FROM unnest(enum_range(NULL::river_job_state)) AS s
   WHERE s::text NOT IN ('completed', 'discarded', 'cancelled'))
SELECT q.queue, s.state, coalesce(u.n, 0)
  FROM queues q CROSS JOIN states s
  LEFT JOIN unfinished u ON u.queue = q.queue AND u.state = s.state
 ORDER BY 1, 2`

func riverJobCounts(ctx context.Context, db DB) []JobCount {
	rows, err := db.Query(ctx, sqlRiverJobCounts)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var out []JobCount
	for rows.Next() {
		var j JobCount
		if rows.Scan(&j.Queue, &j.State, &j.N) == nil {
			out = append(out, j)
		}
	}
	return out
}

func lastReconcileRun(ctx context.Context, db DB) *ReconcileRunCounts {
	var r ReconcileRunCounts
	var raw []byte
	err := db.QueryRow(ctx, `SELECT finished_at, counts FROM reconcile_runs ORDER BY finished_at DESC, run_id DESC LIMIT 1`).
		Scan(&r.FinishedAt, &raw)
	if err != nil || json.Unmarshal(raw, &r.Counts) != nil {
		return nil // no run yet, or the table is not there
	}
	return &r
}

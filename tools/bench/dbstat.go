package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// dbMark is the database's counters at one moment.
type dbMark struct {
	at                                  time.Time
	commits, rollback, walLSN, walSyncs int64 // walLSN: bytes since 0/0
}

// dbWatch reads the counters of one database and samples what its busy
// backends wait on, over one load. Only the sampling goroutine writes counts
// and samples; finish reads them after it has ended (done).
type dbWatch struct {
	dbName     string
	conn       *pgx.Conn
	start      dbMark
	stop, done chan struct{}
	counts     map[string]float64
	samples    int
}

// watchDB starts watching, sampling every interval; its finish ends it.
func watchDB(ctx context.Context, url, dbName string, every time.Duration) (*dbWatch, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	w := &dbWatch{dbName: dbName, conn: conn, stop: make(chan struct{}), done: make(chan struct{}), counts: map[string]float64{}}
	if w.start, err = w.mark(ctx); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	go w.sample(ctx, every)
	return w, nil
}

func (w *dbWatch) mark(ctx context.Context) (dbMark, error) {
	m := dbMark{at: time.Now()}
	// Counters are flushed by each backend at most once a second (pg_stat_*),
	// which is small against a load of several seconds.
	err := w.conn.QueryRow(ctx, `
		SELECT d.xact_commit, d.xact_rollback,
		       (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint,
		       (SELECT wal_sync FROM pg_stat_wal)
		  FROM pg_stat_database d WHERE d.datname = $1`, w.dbName).Scan(&m.commits, &m.rollback, &m.walLSN, &m.walSyncs)
	return m, err
}

// sample counts the states of the database's busy backends every interval.
func (w *dbWatch) sample(ctx context.Context, every time.Duration) {
	defer close(w.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rows, err := w.conn.Query(ctx, `
			SELECT state, coalesce(wait_event_type, ''), coalesce(wait_event, '')
			  FROM pg_stat_activity
			 WHERE datname = $1 AND pid <> pg_backend_pid()
			   AND state IN ('active', 'idle in transaction')`, w.dbName)
		if err != nil {
			return
		}
		for rows.Next() {
			var state, typ, ev string
			if rows.Scan(&state, &typ, &ev) == nil {
				w.counts[waitName(state, typ, ev)]++
			}
		}
		rows.Close()
		w.samples++
	}
}

func waitName(state, typ, ev string) string {
	switch {
	case state == "idle in transaction":
		return "in transaction, waiting for the client"
	case typ == "":
		return "running (CPU)"
	case typ == "Lock" && ev == "object":
		return "Lock:object (NOTIFY's commit lock)"
	}
	return typ + ":" + ev
}

// finish stops the sampling and returns the deltas. The commits leave out
// the watch's own (its samples and its first mark) and own more of the
// harness's transactions in the database meanwhile.
func (w *dbWatch) finish(ctx context.Context, own int64) DB {
	close(w.stop)
	<-w.done
	defer w.conn.Close(context.WithoutCancel(ctx))
	end, err := w.mark(context.WithoutCancel(ctx))
	if err != nil {
		return DB{}
	}
	d := DB{
		Commits:   max(0, end.commits-w.start.commits-int64(w.samples)-1-own),
		Rollbacks: end.rollback - w.start.rollback,
		WALBytes:  end.walLSN - w.start.walLSN,
		WALSyncs:  end.walSyncs - w.start.walSyncs,
		Samples:   w.samples,
	}
	d.rates(end.at.Sub(w.start.at).Seconds())
	d.Waits = topShares(w.counts, 0, 8)
	return d
}

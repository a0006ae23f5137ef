package capacity

import (
	"context"
	"fmt"
)

// walMark is a position in the write-ahead log.
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

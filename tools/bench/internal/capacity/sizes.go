package capacity

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// sizes measures every table the fill wrote.
func (e *env) sizes(ctx context.Context) ([]Size, error) {
	var out []Size
	for _, t := range []string{"idempotency_keys", "label_intents", "labels", "river_job"} {
		s, err := tableSize(ctx, e.pool, t)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// tableSize measures one table after VACUUM ANALYZE: heap, indexes and
// TOAST, in total and per row.
func tableSize(ctx context.Context, db *pgxpool.Pool, table string) (Size, error) {
	s := Size{Table: table}
	err := db.QueryRow(ctx, `
		SELECT pg_table_size(c.oid), pg_indexes_size(c.oid), pg_total_relation_size(c.oid),
		       coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0)
		  FROM pg_class c WHERE c.oid = $1::regclass`, table).Scan(&s.HeapBytes, &s.IndexBytes, &s.TotalBytes, &s.ToastBytes)
	if err != nil {
		return s, err
	}
	s.HeapBytes -= s.ToastBytes
	if err := db.QueryRow(ctx, `SELECT count(*), coalesce(avg(pg_column_size(t.*)), 0) FROM `+table+` t`).Scan(&s.Rows, &s.TupleBytesAvg); err != nil {
		return s, err
	}
	rows, err := db.Query(ctx, `SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index WHERE indrelid = $1::regclass ORDER BY 1`, table)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var ix IndexSize
		if err := rows.Scan(&ix.Name, &ix.Bytes); err != nil {
			return s, err
		}
		s.Indexes = append(s.Indexes, ix)
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	s.perRow()
	return s, nil
}

func (s *Size) perRow() {
	if s.Rows == 0 {
		return
	}
	n := float64(s.Rows)
	s.BytesPerRow = float64(s.TotalBytes) / n
	s.HeapPerRow = float64(s.HeapBytes) / n
	s.IndexPerRow = float64(s.IndexBytes) / n
	s.ToastPerRow = float64(s.ToastBytes) / n
	for i := range s.Indexes {
		s.Indexes[i].PerRow = float64(s.Indexes[i].Bytes) / n
	}
}

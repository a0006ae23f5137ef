package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labelkit/labels/postgres"
)

// DefaultRetention is RECONCILE_RETENTION's default: how long a saved run
// (its summary, items and void items) is kept after it started.
const DefaultRetention = 90 * 24 * time.Hour

// LineRetentionMargin is how much longer than the runs an invoice line is
// kept after it was billed: a run reads the lines of the days before it
// started (its period, and neighbouring days for credits and duplicates), so
// the lines a kept run shows are still there.
const LineRetentionMargin = 31 * 24 * time.Hour

// PurgeRun deletes the oldest saved run that started more than retention ago
// by the database's clock, with its items (DROP TABLE of its partition) and
// its void items, in one transaction, and returns its id (0: none was
// deleted). A run is kept while a void asked for one of its items has no
// outcome yet (its void job may still record it), and while a run is in
// progress (it takes the runs' advisory lock without waiting: the next sweep
// tries again). The voids themselves (reconcile_voids, one per carrier label
// ever asked to be voided, the guard that voids a label once) are kept.
func PurgeRun(ctx context.Context, pool *pgxpool.Pool, retention time.Duration) (int64, error) {
	var runID int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, int64(advisoryLockKey)).Scan(&locked); err != nil || !locked {
			return err
		}
		sql, args := postgres.PurgeSQL(ctx, `
			SELECT run_id FROM reconcile_runs r
			 WHERE started_at < now() - make_interval(secs => $1)
			   AND NOT EXISTS (SELECT 1 FROM reconcile_void_items vi JOIN reconcile_voids v USING (carrier_label_id)
			                    WHERE vi.run_id = r.run_id AND v.outcome IS NULL)
			 ORDER BY started_at
			 LIMIT 1
			   FOR UPDATE SKIP LOCKED`, 2)
		err := tx.QueryRow(ctx, sql, append([]any{retention.Seconds()}, args...)...).Scan(&runID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		} else if err != nil {
			return err
		}
		part := pgx.Identifier{fmt.Sprintf("reconcile_items_%d", runID)}.Sanitize()
		if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+part); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM reconcile_void_items WHERE run_id = $1`, runID); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM reconcile_runs WHERE run_id = $1`, runID)
		return err
	})
	if err != nil {
		return 0, err
	}
	return runID, nil
}

// PurgeInvoiceLines deletes up to batch invoice lines billed more than
// retention plus [LineRetentionMargin] ago by the database's clock, skipping
// rows another sweeper holds, and returns how many it deleted. The lines a
// void refers to (the charge voided, and the void credits, which a run finds
// whichever invoice carried them) are kept with the voids.
func PurgeInvoiceLines(ctx context.Context, db postgres.DB, retention time.Duration, batch int) (int64, error) {
	sql, args := postgres.PurgeSQL(ctx, `
		DELETE FROM invoice_lines
		 WHERE ctid IN (SELECT ctid FROM invoice_lines l
		                 WHERE billed_at < now() - make_interval(secs => $1)
		                   AND charge_type <> 'void_credit'
		                   AND NOT EXISTS (SELECT 1 FROM reconcile_voids v WHERE v.invoice_no = l.invoice_no AND v.line_no = l.line_no)
		                   AND NOT EXISTS (SELECT 1 FROM reconcile_void_items vi WHERE vi.invoice_no = l.invoice_no AND vi.line_no = l.line_no)
		                 LIMIT $2
		                   FOR UPDATE SKIP LOCKED)`, 3)
	tag, err := db.Exec(ctx, sql, append([]any{(retention + LineRetentionMargin).Seconds(), batch}, args...)...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

package reconcile

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// importResult is what importing one invoice did.
type importResult struct {
	read   int         // data rows of the file
	stored int         // lines stored by this run
	days   []time.Time // the billing days (UTC midnight) of the lines, sorted
	// staged is true when the lines were compared through the temporary table
	// rc_stage (some were imported before): the lines of the run are then those
	// of rc_stage, not only those stored by the run.
	staged bool
	// repeatedKeys are the carrier keys the file bills more than once (and,
	// rarely, a key whose hash another shares): the labels that may have
	// several lines.
	repeatedKeys []string
}

// importInvoice stores the lines of rs not imported before, in tx.
//
// The common case, a file never seen, is one COPY straight into invoice_lines
// (under a savepoint). When a line of the file is there already, or the file
// repeats a line, the savepoint is rolled back and the file is read again into
// a temporary table, compared line by line with what is stored, and only new
// lines are inserted. A line that comes back with other content is an error
// naming it, and the caller rolls everything back.
func importInvoice(ctx context.Context, tx pgx.Tx, rs io.ReadSeeker, source string, runID int64, progress func(read int)) (importResult, error) {
	start, err := rs.Seek(0, io.SeekCurrent)
	if err != nil {
		return importResult{}, err
	}

	lr, err := newLineReader(rs, source)
	if err != nil {
		return importResult{}, err
	}
	var first Line
	switch err := lr.next(&first); {
	case errors.Is(err, io.EOF):
		return importResult{}, nil // a header and nothing billed
	case err != nil:
		return importResult{}, err
	}
	var seen bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM invoice_lines WHERE invoice_no = $1 AND line_no = $2)`,
		first.InvoiceNo, first.LineNo).Scan(&seen); err != nil {
		return importResult{}, err
	}
	if !seen {
		res, err := copyNew(ctx, tx, lr, &first, runID, progress)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			return res, err
		}
		// A line of the file was imported before, or the file repeats one.
	}
	if _, err := rs.Seek(start, io.SeekStart); err != nil {
		return importResult{}, err
	}
	return stageAndMerge(ctx, tx, rs, source, runID, progress)
}

// copyNew copies every line into invoice_lines under a savepoint; a unique
// violation rolls the savepoint back and is returned as it is.
func copyNew(ctx context.Context, tx pgx.Tx, lr *lineReader, first *Line, runID int64, progress func(int)) (importResult, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return importResult{}, err
	}
	defer sp.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	enc := &copyEncoder{lr: lr, pending: first, runID: runID, progress: progress, days: map[time.Time]bool{}}
	tag, err := sp.Conn().PgConn().CopyFrom(ctx, enc,
		`COPY invoice_lines (`+strings.Join(invoiceColumns[:], ", ")+`, charge_type, run_id) FROM STDIN (FORMAT binary)`)
	if enc.err != nil {
		return importResult{}, enc.err // the file's fault, not the database's
	}
	if err != nil {
		return importResult{}, err
	}
	if err := sp.Commit(ctx); err != nil {
		return importResult{}, err
	}
	return importResult{read: enc.read, stored: int(tag.RowsAffected()), days: sortedDays(enc.days), repeatedKeys: enc.repeatedKeys()}, nil
}

// stageAndMerge is the path for a file some of whose lines were seen before.
func stageAndMerge(ctx context.Context, tx pgx.Tx, rs io.Reader, source string, runID int64, progress func(int)) (importResult, error) {
	lr, err := newLineReader(rs, source)
	if err != nil {
		return importResult{}, err
	}
	if _, err := tx.Exec(ctx, `
		CREATE TEMP TABLE rc_stage (
			seq int NOT NULL, invoice_no text NOT NULL, line_no int NOT NULL, billed_at timestamptz NOT NULL,
			carrier_label_id text NOT NULL, tracking_no text NOT NULL, idempotency_key text NOT NULL,
			reference text NOT NULL, cost_cents bigint NOT NULL, currency text NOT NULL, charge_type text NOT NULL
		) ON COMMIT DROP`); err != nil {
		return importResult{}, err
	}
	enc := &copyEncoder{lr: lr, withSeq: true, progress: progress, days: map[time.Time]bool{}}
	if _, err := tx.Conn().PgConn().CopyFrom(ctx, enc,
		`COPY rc_stage (seq, `+strings.Join(invoiceColumns[:], ", ")+`, charge_type) FROM STDIN (FORMAT binary)`); err != nil {
		if enc.err != nil {
			return importResult{}, enc.err
		}
		return importResult{}, err
	}
	if enc.err != nil {
		return importResult{}, enc.err
	}
	res := importResult{read: enc.read, days: sortedDays(enc.days), staged: true, repeatedKeys: enc.repeatedKeys()}

	// A line the file repeats: the same content is the same line, other content is an error.
	const pair = `
		SELECT b.seq, a.seq,
		       a.billed_at, a.carrier_label_id, a.tracking_no, a.idempotency_key, a.reference, a.cost_cents, a.currency, a.charge_type,
		       b.billed_at, b.carrier_label_id, b.tracking_no, b.idempotency_key, b.reference, b.cost_cents, b.currency, b.charge_type,
		       b.invoice_no, b.line_no
		  FROM %s a JOIN rc_stage b ON a.invoice_no = b.invoice_no AND a.line_no = b.line_no
		 WHERE %s AND (a.billed_at, a.carrier_label_id, a.tracking_no, a.idempotency_key, a.reference, a.cost_cents, a.currency, a.charge_type)
		       IS DISTINCT FROM (b.billed_at, b.carrier_label_id, b.tracking_no, b.idempotency_key, b.reference, b.cost_cents, b.currency, b.charge_type)
		 ORDER BY b.seq, a.seq
		 LIMIT 1`
	if err := conflict(ctx, tx, source, fmt.Sprintf(pair, "rc_stage", "a.seq < b.seq"), "appears again with other content (first on line %d)"); err != nil {
		return res, err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM rc_stage b USING rc_stage a
		WHERE a.invoice_no = b.invoice_no AND a.line_no = b.line_no AND a.seq < b.seq`); err != nil {
		return res, err
	}
	// A line imported before: the same content changes nothing, other content is an error.
	if err := conflict(ctx, tx, source, fmt.Sprintf(pair, storedLines, "true"), "was imported before with other content"); err != nil {
		return res, err
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO invoice_lines (invoice_no, line_no, billed_at, carrier_label_id, tracking_no, idempotency_key, reference, cost_cents, currency, charge_type, run_id)
		SELECT s.invoice_no, s.line_no, s.billed_at, s.carrier_label_id, s.tracking_no, s.idempotency_key, s.reference, s.cost_cents, s.currency, s.charge_type, $1
		  FROM rc_stage s
		 WHERE NOT EXISTS (SELECT 1 FROM invoice_lines i WHERE i.invoice_no = s.invoice_no AND i.line_no = s.line_no)`, runID)
	if err != nil {
		return res, err
	}
	res.stored = int(tag.RowsAffected())
	if _, err := tx.Exec(ctx, `ANALYZE rc_stage`); err != nil {
		return res, err
	}
	return res, nil
}

// storedLines are the stored lines that may share an invoice number with the
// staged ones; the range keeps the join to the file's invoices.
const storedLines = `(SELECT 0 AS seq, * FROM invoice_lines
	WHERE invoice_no BETWEEN (SELECT min(invoice_no) FROM rc_stage) AND (SELECT max(invoice_no) FROM rc_stage))`

// conflict runs query (see stageAndMerge) and turns the first row it finds
// into an error naming the file line and the fields that differ.
func conflict(ctx context.Context, tx pgx.Tx, source, query, what string) error {
	var (
		seq, firstSeq int
		a, b          Line
	)
	err := tx.QueryRow(ctx, query).Scan(&seq, &firstSeq,
		&a.BilledAt, &a.CarrierLabelID, &a.TrackingNo, &a.IdempotencyKey, &a.Reference, &a.CostCents, &a.Currency, &a.ChargeType,
		&b.BilledAt, &b.CarrierLabelID, &b.TrackingNo, &b.IdempotencyKey, &b.Reference, &b.CostCents, &b.Currency, &b.ChargeType,
		&b.InvoiceNo, &b.LineNo)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("invoice %s line %d ", b.InvoiceNo, b.LineNo)
	if firstSeq > 0 {
		msg += fmt.Sprintf(what, firstSeq)
	} else {
		msg += what
	}
	return &ParseError{Source: source, Line: seq, Err: fmt.Errorf("%s: %s", msg, differences(&a, &b))}
}

// copyEncoder turns invoice lines into PostgreSQL's binary COPY format as
// COPY reads it, with no value boxed on the way: at a million lines the
// encoding is a good part of the import. A parse error ends the stream and is
// kept in err (COPY then fails and the transaction is rolled back).
type copyEncoder struct {
	lr       *lineReader
	pending  *Line // a line read before the COPY started
	runID    int64
	withSeq  bool // rc_stage: the file line first, no run id
	progress func(int)
	days     map[time.Time]bool

	buf      []byte
	off      int
	started  bool
	done     bool
	read     int
	err      error
	line     Line
	seed     maphash.Seed
	keys     map[uint64]struct{} // hashes of the carrier keys seen
	repeated map[string]struct{} // keys seen again
}

// progressEvery is how many lines pass between two progress reports.
const progressEvery = 25_000

// pgEpoch is where PostgreSQL's binary timestamps count from.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func (e *copyEncoder) Read(p []byte) (int, error) {
	for len(e.buf)-e.off < len(p) && !e.done {
		e.fill(len(p))
	}
	n := copy(p, e.buf[e.off:])
	e.off += n
	if e.off == len(e.buf) {
		e.buf, e.off = e.buf[:0], 0
		if e.done && n == 0 {
			if e.err != nil {
				return 0, e.err
			}
			return 0, io.EOF
		}
	}
	return n, nil
}

// fill encodes lines until about want bytes are buffered or the file ends.
func (e *copyEncoder) fill(want int) {
	if e.off > 0 {
		e.buf = append(e.buf[:0], e.buf[e.off:]...)
		e.off = 0
	}
	if !e.started {
		e.started = true
		e.buf = append(e.buf, "PGCOPY\n\xff\r\n\x00"...)
		e.buf = binary.BigEndian.AppendUint32(e.buf, 0) // flags
		e.buf = binary.BigEndian.AppendUint32(e.buf, 0) // header extension
	}
	for len(e.buf) < want {
		if e.pending != nil {
			e.line, e.pending = *e.pending, nil
		} else if err := e.lr.next(&e.line); err != nil {
			if !errors.Is(err, io.EOF) {
				e.err = err
			}
			e.buf = binary.BigEndian.AppendUint16(e.buf, 0xffff) // trailer
			e.done = true
			return
		}
		e.read++
		l := &e.line
		if day := l.BilledAt.Truncate(24 * time.Hour); !e.days[day] {
			e.days[day] = true
		}
		e.noteKey(l.IdempotencyKey)
		e.buf = binary.BigEndian.AppendUint16(e.buf, 11)
		if e.withSeq {
			e.int4(int32(e.lr.fileLine()))
		}
		e.text(l.InvoiceNo)
		e.int4(int32(l.LineNo))
		e.buf = binary.BigEndian.AppendUint32(e.buf, 8)
		e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(l.BilledAt.Sub(pgEpoch).Microseconds()))
		e.text(l.CarrierLabelID)
		e.text(l.TrackingNo)
		e.text(l.IdempotencyKey)
		e.text(l.Reference)
		e.int8(l.CostCents)
		e.text(l.Currency)
		e.text(l.ChargeType)
		if !e.withSeq {
			e.int8(e.runID)
		}
		if e.progress != nil && e.read%progressEvery == 0 {
			e.progress(e.read)
		}
	}
}

// noteKey remembers key by its hash, and the key itself when seen again:
// eight bytes a line instead of the key, at the price of a rare false "again".
func (e *copyEncoder) noteKey(key string) {
	if key == "" {
		return
	}
	if e.keys == nil {
		e.seed = maphash.MakeSeed()
		e.keys = map[uint64]struct{}{}
		e.repeated = map[string]struct{}{}
	}
	h := maphash.String(e.seed, key)
	if _, ok := e.keys[h]; ok {
		e.repeated[key] = struct{}{}
		return
	}
	e.keys[h] = struct{}{}
}

func (e *copyEncoder) repeatedKeys() []string {
	keys := make([]string, 0, len(e.repeated))
	for k := range e.repeated {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (e *copyEncoder) text(s string) {
	e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(len(s)))
	e.buf = append(e.buf, s...)
}

func (e *copyEncoder) int4(v int32) {
	e.buf = binary.BigEndian.AppendUint32(e.buf, 4)
	e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(v))
}

func (e *copyEncoder) int8(v int64) {
	e.buf = binary.BigEndian.AppendUint32(e.buf, 8)
	e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(v))
}

func sortedDays(m map[time.Time]bool) []time.Time {
	days := make([]time.Time, 0, len(m))
	for d := range m {
		days = append(days, d)
	}
	sort.Slice(days, func(i, j int) bool { return days[i].Before(days[j]) })
	return days
}

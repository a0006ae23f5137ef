package reconcile

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Line is one line of a carrier invoice, as carrier.md describes the CSV.
type Line struct {
	InvoiceNo      string
	LineNo         int
	BilledAt       time.Time
	CarrierLabelID string
	TrackingNo     string
	// IdempotencyKey is the carrier key of the purchase; empty when the carrier has none.
	IdempotencyKey string
	// Reference is our label request id, echoed by the carrier; may be empty.
	Reference string
	// CostCents is negative for a credit or refund.
	CostCents int64
	Currency  string
	// ChargeType is the optional charge_type column: empty for a charge (the
	// column absent, empty, or "charge"), [ChargeVoidCredit] for the credit
	// of a voided label, any other value as the invoice gives it.
	ChargeType string
}

// ChargeVoidCredit is the charge_type of the credit line of a voided label.
const ChargeVoidCredit = "void_credit"

// chargeTypeColumn is the optional column that tells a void's credit from
// other lines. Carriers that void nothing leave it out.
const chargeTypeColumn = "charge_type"

// chargeType reads a charge_type value: a plain charge is stored as "", so a
// line reads the same with the column and without it.
func chargeType(v string) string {
	if v == "charge" {
		return ""
	}
	return v
}

// invoiceColumns are the columns of carrier.md, in its order.
var invoiceColumns = [...]string{
	"invoice_no", "line_no", "billed_at", "carrier_label_id", "tracking_no",
	"idempotency_key", "reference", "cost_cents", "currency",
}

// maxField bounds every text field: carrier keys are at most 255 characters,
// and nothing else on an invoice comes near.
const maxField = 255

// ParseError is an invoice line that cannot be read; nothing of the file is
// imported.
type ParseError struct {
	Source string // the file name, or "carrier:YYYY-MM-DD"
	Line   int    // the line of the file, from 1 (the header is line 1)
	Column string // empty when the whole line is at fault
	Err    error
}

func (e *ParseError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("%s:%d: %v", e.Source, e.Line, e.Err)
	}
	return fmt.Sprintf("%s:%d: %s: %v", e.Source, e.Line, e.Column, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// lineReader reads and validates the lines of one invoice, one at a time.
type lineReader struct {
	source string
	r      *csv.Reader
	col    [len(invoiceColumns)]int // column index of each field in the file
	ctype  int                      // column index of charge_type, -1 when absent
	rows   int                      // data rows read so far
}

// newLineReader reads the header of an invoice. Columns may come in any order
// and extra columns are ignored; every column of carrier.md must be there.
// Lines and fields are read within the bounds of [BoundedInvoice].
func newLineReader(src io.Reader, source string) (*lineReader, error) {
	r := csv.NewReader(BoundedInvoice(src, source))
	r.ReuseRecord = true
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, &ParseError{Source: source, Line: 1, Err: errors.New("empty file: no header line")}
	}
	if err != nil {
		return nil, csvError(source, err)
	}
	lr := &lineReader{source: source, r: r}
	col, missing := headerColumns(header)
	if len(missing) > 0 {
		return nil, &ParseError{Source: source, Line: 1, Err: fmt.Errorf("header lacks %s (want %s)",
			strings.Join(missing, ", "), strings.Join(invoiceColumns[:], ","))}
	}
	lr.col = col
	lr.ctype = -1
	for i, name := range header {
		if i == 0 {
			name = strings.TrimPrefix(name, "\ufeff")
		}
		if strings.TrimSpace(name) == chargeTypeColumn {
			lr.ctype = i
		}
	}
	r.FieldsPerRecord = len(header)
	return lr, nil
}

// headerColumns finds the column of each field of carrier.md in a header
// (-1 for one that is missing, which missing names).
func headerColumns(header []string) (col [len(invoiceColumns)]int, missing []string) {
	seen := map[string]int{}
	for i, name := range header {
		if i == 0 {
			name = strings.TrimPrefix(name, "\ufeff") // a byte order mark some tools write
		}
		seen[strings.TrimSpace(name)] = i
	}
	for i, name := range invoiceColumns {
		idx, ok := seen[name]
		if !ok {
			missing, idx = append(missing, name), -1
		}
		col[i] = idx
	}
	return col, missing
}

// next reads the next line into l; it returns io.EOF after the last one. The
// file line of the line read is lr.fileLine().
func (lr *lineReader) next(l *Line) error {
	rec, err := lr.r.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		return csvError(lr.source, err)
	}
	lr.rows++
	line, _ := lr.r.FieldPos(0)
	fail := func(col int, format string, args ...any) error {
		return &ParseError{Source: lr.source, Line: line, Column: invoiceColumns[col], Err: fmt.Errorf(format, args...)}
	}
	field := func(col int) (string, error) {
		v := rec[lr.col[col]]
		switch {
		case len(v) > maxField:
			return "", fail(col, "longer than %d bytes", maxField)
		case !utf8.ValidString(v):
			return "", fail(col, "not UTF-8")
		case strings.IndexByte(v, 0) >= 0:
			return "", fail(col, "contains a NUL byte")
		}
		return v, nil
	}
	var v [len(invoiceColumns)]string
	for i := range invoiceColumns {
		if v[i], err = field(i); err != nil {
			return err
		}
	}
	if v[0] == "" {
		return fail(0, "empty")
	}
	n, err := strconv.ParseInt(v[1], 10, 32)
	if err != nil || n < 1 {
		return fail(1, "want a positive integer, got %q", v[1])
	}
	at, err := time.Parse(time.RFC3339, v[2])
	if err != nil {
		return fail(2, "want an RFC 3339 time like 2026-12-02T10:00:01Z, got %q", v[2])
	}
	cost, err := strconv.ParseInt(v[7], 10, 64)
	if err != nil {
		return fail(7, "want an integer number of cents, got %q", v[7])
	}
	if !isCurrency(v[8]) {
		return fail(8, "want a three-letter ISO 4217 code like USD, got %q", v[8])
	}
	var ct string
	if lr.ctype >= 0 {
		ct = rec[lr.ctype]
		switch {
		case len(ct) > maxField:
			return &ParseError{Source: lr.source, Line: line, Column: chargeTypeColumn, Err: fmt.Errorf("longer than %d bytes", maxField)}
		case !utf8.ValidString(ct) || strings.IndexByte(ct, 0) >= 0:
			return &ParseError{Source: lr.source, Line: line, Column: chargeTypeColumn, Err: errors.New("not UTF-8 text")}
		}
		ct = chargeType(ct)
		if ct == ChargeVoidCredit && cost >= 0 {
			return &ParseError{Source: lr.source, Line: line, Column: invoiceColumns[7], Err: fmt.Errorf("a void_credit line must be negative, got %d", cost)}
		}
	}
	*l = Line{
		InvoiceNo:      v[0],
		LineNo:         int(n),
		BilledAt:       at.UTC(),
		CarrierLabelID: v[3],
		TrackingNo:     v[4],
		IdempotencyKey: v[5],
		Reference:      v[6],
		CostCents:      cost,
		Currency:       v[8],
		ChargeType:     ct,
	}
	return nil
}

// fileLine is the line of the file the last line read starts on.
func (lr *lineReader) fileLine() int {
	line, _ := lr.r.FieldPos(0)
	return line
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

func csvError(source string, err error) error {
	var bound *ParseError // a bound of BoundedInvoice
	if errors.As(err, &bound) {
		return bound
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &ParseError{Source: source, Line: pe.Line, Err: pe.Err}
	}
	return fmt.Errorf("%s: %w", source, err)
}

// differences names the fields in which b differs from a, for error messages.
func differences(a, b *Line) string {
	var d []string
	add := func(name, x, y string) {
		if x != y {
			d = append(d, fmt.Sprintf("%s %q, now %q", name, x, y))
		}
	}
	add("billed_at", a.BilledAt.UTC().Format(time.RFC3339Nano), b.BilledAt.UTC().Format(time.RFC3339Nano))
	add("carrier_label_id", a.CarrierLabelID, b.CarrierLabelID)
	add("tracking_no", a.TrackingNo, b.TrackingNo)
	add("idempotency_key", a.IdempotencyKey, b.IdempotencyKey)
	add("reference", a.Reference, b.Reference)
	add("cost_cents", strconv.FormatInt(a.CostCents, 10), strconv.FormatInt(b.CostCents, 10))
	add("currency", a.Currency, b.Currency)
	add("charge_type", a.ChargeType, b.ChargeType)
	return strings.Join(d, "; ")
}

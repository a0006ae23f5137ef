package reconcile

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
)

// maxLine bounds one line of an invoice (one CSV record, with every column
// and the quoting, as it is in the file): the header, or a charge. The
// columns of carrier.md at their limit take 9 × (2×255+2) + 8 = 4,616 bytes;
// the rest is room for columns a carrier adds, which are read and ignored.
const maxLine = 64 << 10

// maxRawField bounds the text of one column of carrier.md as it is in the
// file. A field of more than this decodes to more than maxField bytes (a
// quoted field decodes at least one byte from every two, "" being one quote),
// so a field refused here is refused for what it holds, not for its quoting.
const maxRawField = 2*maxField + 2

// BoundedInvoice returns a reader of the invoice CSV r that fails, with a
// [*ParseError] naming the line (and the column of carrier.md, when one is at
// fault), as soon as a line passes 64 KiB or a column of carrier.md passes
// its 255 bytes. What has been read of the line at fault stays below those
// bounds: no field or line of an invoice is ever held whole when it is too
// long. It is what every invoice read by this package goes through; a caller
// that reads the invoice into memory first (a fetch) can put it in front.
func BoundedInvoice(r io.Reader, source string) io.Reader {
	return &boundedReader{r: r, source: source, line: 1, recLine: 1, inHeader: true}
}

// Quote states of a field, as encoding/csv parses it (LazyQuotes off).
const (
	plain      = iota // unquoted, or not started
	quoted            // inside a quoted field
	afterQuote        // a quote inside a quoted field: the end, or the first of ""
)

// boundedReader follows the CSV structure of what it passes on (quotes,
// commas, line ends) and stops at the first byte over a bound: the bytes
// before it are returned, then the error, for good.
type boundedReader struct {
	r      io.Reader
	source string

	line     int // line of the file of the next byte, from 1
	recLine  int // line the current record starts on
	recLen   int // bytes of the current record so far
	field    int // index of the current field in the record
	fieldLen int // bytes of the current field so far
	q        int // quote state of the current field

	inHeader bool
	header   []byte   // the header record while it is read
	bounds   []int    // maxRawField for a column of carrier.md, 0 for another
	names    []string // the column names, for errors
	err      error
}

// Bytes that end a run the scanner skips over: in an unquoted field, and in a
// quoted one.
var plainStop, quotedStop [256]bool

func init() {
	plainStop[','], plainStop['\n'], plainStop['"'] = true, true, true
	quotedStop['"'], quotedStop['\n'] = true, true
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	if k := b.scan(p[:n]); k < n {
		return k, b.err
	}
	return n, err
}

// scan follows p and returns how many of its bytes are within the bounds
// (len(p) unless b.err is set).
func (b *boundedReader) scan(p []byte) int {
	start := 0 // the first byte of p not yet appended to b.header
	i := 0
	for i < len(p) {
		// Skip the bytes that change nothing but the lengths.
		if b.q != afterQuote {
			stop := &plainStop
			if b.q == quoted {
				stop = &quotedStop
			}
			j := i
			for j < len(p) && !stop[p[j]] {
				j++
			}
			if k := b.room(); j-i > k {
				b.fail(b.fieldBinds())
				return i + k
			}
			b.fieldLen += j - i
			b.recLen += j - i
			if i = j; i == len(p) {
				break
			}
		}
		c := p[i]
		if b.q != quoted && (c == '\n' || c == ',') {
			if c == '\n' { // the end of the record
				if b.inHeader {
					b.header = append(b.header, p[start:i+1]...)
					start = i + 1
					b.endHeader()
				}
				b.line++
				b.recLine, b.recLen, b.field, b.fieldLen, b.q = b.line, 0, 0, 0, plain
				i++
				continue
			}
			if b.recLen >= maxLine { // the comma is the record's, not the field's
				b.fail(false)
				return i
			}
			b.recLen++
			b.field, b.fieldLen, b.q = b.field+1, 0, plain
			i++
			continue
		}
		if k := b.room(); k < 1 {
			b.fail(b.fieldBinds())
			return i
		}
		switch {
		case c == '\n': // in a quoted field
			b.line++
		case c == '"' && b.q == quoted:
			b.q = afterQuote
		case c == '"' && b.q == afterQuote:
			b.q = quoted // "", one quote
		case c == '"' && b.fieldLen == 0:
			b.q = quoted
		case b.q == afterQuote:
			b.q = plain // a quote and more in a quoted field: encoding/csv refuses it
		}
		b.fieldLen++
		b.recLen++
		i++
	}
	if b.inHeader {
		b.header = append(b.header, p[start:]...)
	}
	return len(p)
}

// fieldRoom is how many more bytes the current field may take, by its own
// bound (maxLine for a column with none).
func (b *boundedReader) fieldRoom() int {
	if b.bounded() {
		return b.bounds[b.field] - b.fieldLen
	}
	return maxLine
}

// bounded reports whether the current field is a column of carrier.md.
func (b *boundedReader) bounded() bool {
	return b.field < len(b.bounds) && b.bounds[b.field] > 0
}

// fieldBinds reports whether the field's bound, not the line's, is the one
// reached first.
func (b *boundedReader) fieldBinds() bool {
	return b.bounded() && b.fieldRoom() <= maxLine-b.recLen
}

// room is how many more bytes the current field may take, by its bound and
// the record's.
func (b *boundedReader) room() int {
	return min(maxLine-b.recLen, b.fieldRoom())
}

// fail sets the error for the byte after those scanned: the field's bound
// when field is set, else the line's.
func (b *boundedReader) fail(field bool) {
	pe := &ParseError{Source: b.source, Line: b.recLine}
	if field {
		pe.Column = b.names[b.field]
		pe.Err = fmt.Errorf("longer than %d bytes", maxField)
	} else {
		pe.Err = fmt.Errorf("the line is longer than %d bytes", maxLine)
	}
	b.err = pe
}

// endHeader learns from the header which columns are those of carrier.md.
// A header encoding/csv cannot read leaves every column to the line bound:
// the reader of the header refuses it anyway.
func (b *boundedReader) endHeader() {
	b.inHeader = false
	header, err := csv.NewReader(bytes.NewReader(b.header)).Read()
	b.header = nil
	if err != nil {
		return
	}
	b.bounds = make([]int, len(header))
	b.names = make([]string, len(header))
	col, _ := headerColumns(header)
	for i, idx := range col {
		if idx >= 0 {
			b.bounds[idx] = maxRawField
			b.names[idx] = invoiceColumns[i]
		}
	}
}

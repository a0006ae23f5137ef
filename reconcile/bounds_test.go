package reconcile_test

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/reconcile"
)

// lazyInvoice is an invoice of head, then n bytes of fill, then tail, made
// as it is read: a 200 MB field costs no memory of its own.
type lazyInvoice struct {
	head, tail string
	n          int64
	fill       byte
	off        int64
}

func (l *lazyInvoice) size() int64 { return int64(len(l.head)) + l.n + int64(len(l.tail)) }

func (l *lazyInvoice) Read(p []byte) (int, error) {
	if l.off >= l.size() {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && l.off < l.size() {
		var c int
		switch h := int64(len(l.head)); {
		case l.off < h:
			c = copy(p[k:], l.head[l.off:])
		case l.off < h+l.n:
			c = int(min(int64(len(p)-k), h+l.n-l.off))
			for i := range p[k : k+c] {
				p[k+i] = l.fill
			}
		default:
			c = copy(p[k:], l.tail[l.off-h-l.n:])
		}
		k += c
		l.off += int64(c)
	}
	return k, nil
}

func (l *lazyInvoice) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += l.off
	case io.SeekEnd:
		offset += l.size()
	}
	if offset < 0 {
		return 0, errors.New("negative position")
	}
	l.off = offset
	return offset, nil
}

// onlyReader hides the Seek of an invoice: what a stream looks like.
type onlyReader struct{ io.Reader }

// A 200 MB reference on line 3 is refused, as longer than 255 bytes and
// naming the line, having read no more of it than the bounds allow: the
// run allocates a few megabytes at most, whether the invoice is a file (read
// in place) or a stream (read into memory first).
func TestImportMemoryBounded(t *testing.T) {
	// Not parallel: the allocation counters are the process's.
	b := setup(t)
	const fieldSize = 200 << 20
	newInvoice := func() *lazyInvoice {
		return &lazyInvoice{
			head: invoice("INV-20261202,1,2026-12-02T10:00:00Z,CL-1,GRD1,carrier:k1,lr_1,612,USD") +
				"INV-20261202,2,2026-12-02T10:00:01Z,CL-2,GRD2,carrier:k2,",
			n:    fieldSize,
			fill: 'r',
			tail: ",612,USD\n",
		}
	}
	for _, tc := range []struct {
		name    string
		invoice func() io.Reader
	}{
		{"file", func() io.Reader { return newInvoice() }},
		{"stream", func() io.Reader { return onlyReader{newInvoice()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := tc.invoice()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := b.try("", func(o *reconcile.Opts) { o.Invoice = inv })
			runtime.ReadMemStats(&after)

			var pe *reconcile.ParseError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "invoice.csv:3: reference: longer than 255 bytes", err.Error())
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %.1f MB for an invoice of %.0f MB", float64(allocated)/(1<<20), float64(fieldSize)/(1<<20))
			require.Less(t, allocated, uint64(16<<20), "bytes allocated while refusing a 200 MB field")
		})
	}
	var stored int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM invoice_lines`).Scan(&stored))
	require.Zero(t, stored, "nothing of a refused file is imported")
}

// Through a run, a field over its bound is the same error as before the
// bounds: the column, the line, exit status 2 for the command.
func TestImportFieldTooLong(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, inv := range []string{
		invoice("INV-1,1,2026-12-02T00:00:00Z,CL-1,GRD1,,lr_" + strings.Repeat("1", 300) + ",612,USD"),
		invoice("INV-1,1,2026-12-02T00:00:00Z,CL-1,GRD1,,lr_" + strings.Repeat("1", 3000) + ",612,USD"),
	} {
		_, err := b.try(inv)
		var pe *reconcile.ParseError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "invoice.csv:2: reference: longer than 255 bytes", err.Error())
		_, err = b.try("", func(o *reconcile.Opts) { o.Invoice = onlyReader{bytes.NewReader([]byte(inv))} })
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "invoice.csv:2: reference: longer than 255 bytes", err.Error())
	}
}

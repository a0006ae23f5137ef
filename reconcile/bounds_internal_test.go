package reconcile

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readAll reads every line of an invoice named invoice.csv.
func readAll(r io.Reader) error {
	lr, err := newLineReader(r, "invoice.csv")
	if err != nil {
		return err
	}
	var l Line
	for {
		if err := lr.next(&l); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// An invoice is refused where a line or field is too long, with the same
// error whether its bound or the check of the field finds it, and nothing
// else is: a field at its limit however it is quoted,
// columns a carrier adds, a line that spans lines of the file.
func TestInvoiceBounds(t *testing.T) {
	t.Parallel()
	const hdr = "invoice_no,line_no,billed_at,carrier_label_id,tracking_no,idempotency_key,reference,cost_cents,currency"
	line := func(ref string) string {
		return "INV-20261202,1,2026-12-02T10:00:00Z,CL-1,GRD1,carrier:k1," + ref + ",612,USD"
	}
	quotes := func(n int) string { return `"` + strings.Repeat(`""`, n) + `"` } // n quotes, 2n+2 bytes
	for _, tc := range []struct {
		name, csv string
		err       string // empty: read to the end
	}{
		{"255 bytes", hdr + "\n" + line(strings.Repeat("r", 255)) + "\n", ""},
		{"255 quotes, 512 bytes", hdr + "\n" + line(quotes(255)) + "\n", ""},
		{"256 bytes", hdr + "\n" + line(strings.Repeat("r", 256)) + "\n", "invoice.csv:2: reference: longer than 255 bytes"},
		{"256 quotes, 514 bytes", hdr + "\n" + line(quotes(256)) + "\n", "invoice.csv:2: reference: longer than 255 bytes"},
		{"513 bytes", hdr + "\n" + line(strings.Repeat("r", 513)) + "\n", "invoice.csv:2: reference: longer than 255 bytes"},
		{"last field, no newline", hdr + "\n" + "INV-1,1,2026-12-02T10:00:00Z,CL-1,GRD1,,,612," + strings.Repeat("U", 600),
			"invoice.csv:2: currency: longer than 255 bytes"},
		{"quoted newlines", hdr + "\n" + line(`"a`+strings.Repeat("\n", 300)+`b"`) + "\n", "invoice.csv:2: reference: longer than 255 bytes"},
		{"after a line with newlines", hdr + "\n" + line(`"a`+strings.Repeat("\n", 3)+`b"`) + "\n" + line(strings.Repeat("r", 1000)) + "\n",
			"invoice.csv:6: reference: longer than 255 bytes"},
		{"columns in another order", "reference," + strings.Replace(hdr, ",reference", "", 1) + "\n" +
			strings.Repeat("r", 600) + ",INV-1,1,2026-12-02T10:00:00Z,CL-1,GRD1,,612,USD\n", "invoice.csv:2: reference: longer than 255 bytes"},
		{"an added column of 10 KiB", hdr + ",note\n" + line("lr_1") + "," + strings.Repeat("n", 10<<10) + "\n", ""},
		{"an added column of 64 KiB", hdr + ",note\n" + line("lr_1") + "," + strings.Repeat("n", 64<<10) + "\n",
			"invoice.csv:2: the line is longer than 65536 bytes"},
		{"a header of 64 KiB", hdr + "," + strings.Repeat("h", 64<<10) + "\n" + line("lr_1") + "\n",
			"invoice.csv:1: the line is longer than 65536 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, rd := range []struct {
				name string
				r    io.Reader
			}{
				{"whole", strings.NewReader(tc.csv)},
				{"a byte at a time", &oneByte{strings.NewReader(tc.csv)}},
			} {
				err := readAll(rd.r)
				if tc.err == "" {
					require.NoError(t, err, rd.name)
					continue
				}
				var pe *ParseError
				require.ErrorAs(t, err, &pe, rd.name)
				require.Equal(t, tc.err, err.Error(), rd.name)
			}
		})
	}
}

// oneByte reads one byte at a time.
type oneByte struct{ r io.Reader }

func (o *oneByte) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

// Invoices within the bounds, quoted every way encoding/csv reads, pass
// through the bounds byte for byte; the same invoice with one field a byte
// over its limit is refused on that field's line.
func TestInvoiceBoundsRandom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	// \r\n in a quoted field reads as \n: the references have no \r, so that
	// their length is what is read.
	text := func(n int, alphabet string) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	quote := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	for round := 0; round < 200; round++ {
		header := append([]string{"note"}, invoiceColumns[:]...)
		over := rng.IntN(10) // the line whose reference is 256 bytes, when < 8
		var b strings.Builder
		b.WriteString(strings.Join(header, ",") + "\n")
		line, overLine := 2, 0
		for i := 0; i < 8; i++ {
			ref := text(rng.IntN(256), "ab,\"\n x")
			if i == over {
				ref, overLine = text(256, "ab,\"\n x"), line
			}
			note := text(rng.IntN(2000), "ab,\"\n\r x")
			rec := []string{quote(note), "INV-1", strconv.Itoa(i + 1), "2026-12-02T10:00:00Z", "CL-1", "GRD1", "", quote(ref), "612", "USD"}
			s := strings.Join(rec, ",") + "\n"
			b.WriteString(s)
			line += strings.Count(s, "\n")
		}
		csv := b.String()
		got, err := io.ReadAll(BoundedInvoice(&oneByte{strings.NewReader(csv)}, "invoice.csv"))
		if overLine == 0 {
			require.NoError(t, err)
			require.Equal(t, csv, string(got))
		}
		err = readAll(strings.NewReader(csv))
		if overLine == 0 {
			require.NoError(t, err, "round %d", round)
			continue
		}
		require.EqualError(t, err, fmt.Sprintf("invoice.csv:%d: reference: longer than 255 bytes", overLine), "round %d", round)
	}
}

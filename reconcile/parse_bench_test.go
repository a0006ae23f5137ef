package reconcile

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/labelkit/labels/carrier/sim"
)

// BenchmarkEncode measures the Go side of an import: reading the CSV and
// encoding it for COPY, per million lines.
func BenchmarkEncode(b *testing.B) {
	var csv bytes.Buffer
	if _, err := sim.WriteSyntheticInvoice(&csv, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), 1_000_000, sim.BillingMix{}, 1); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(csv.Len()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lr, err := newLineReader(bytes.NewReader(csv.Bytes()), "x")
		if err != nil {
			b.Fatal(err)
		}
		enc := &copyEncoder{lr: lr, runID: 1, days: map[time.Time]bool{}}
		if _, err := io.Copy(io.Discard, enc); err != nil {
			b.Fatal(err)
		}
		if enc.read != 1_000_000 {
			b.Fatalf("read %d lines", enc.read)
		}
	}
}

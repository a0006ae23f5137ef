package sim_test

import (
	"io"
	"testing"

	"github.com/labelkit/labels/carrier/sim"
)

func BenchmarkWriteSyntheticInvoice(b *testing.B) {
	mix := sim.BillingMix{DuplicateLineRate: 0.01, AmountChangeRate: 0.01, ForeignLineRate: 0.01, CreditRate: 0.01}
	for b.Loop() {
		if _, err := sim.WriteSyntheticInvoice(io.Discard, day, 100_000, mix, 1); err != nil {
			b.Fatal(err)
		}
	}
}

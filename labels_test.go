package labels_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/idempotency"
)

// plainParcel has Parcel's fields and tags but not its methods: Canonical
// takes the general way (encoding/json and back) for it.
type plainParcel labels.Parcel

// The seed's example parcel: the canonical form every stored fingerprint of
// such a request was made from.
func TestParcelCanonical(t *testing.T) {
	t.Parallel()
	p := labels.Parcel{OrderID: 918273, ParcelNo: 1, WeightG: 1200, Service: "ground", LabelVersion: 1,
		ShipTo: labels.Address{Name: "A. Customer", Line1: "1 Main St", City: "Springfield", PostalCode: "12345", Country: "US"}}
	c, err := idempotency.Canonical(p)
	require.NoError(t, err)
	require.Equal(t, `{"label_version":1,"order_id":918273,"parcel_no":1,"service":"ground",`+
		`"ship_to":{"city":"Springfield","country":"US","line1":"1 Main St","line2":"","name":"A. Customer","postal_code":"12345"},"weight_g":1200}`, string(c))
	general, err := idempotency.Canonical(plainParcel(p))
	require.NoError(t, err)
	require.Equal(t, string(general), string(c))
}

// FuzzParcelCanonical: a parcel's own canonical form is byte for byte the
// one the general way makes, so fingerprints stored before and after it match.
func FuzzParcelCanonical(f *testing.F) {
	f.Add(int64(918273), 1, 1200, "ground", 1, "A. Customer", "1 Main St", "", "Springfield", "12345", "US")
	f.Add(int64(-1), 0, -5, "\"\\\x00\x1f<&>\u2028é", -3, "\xff\xfe", "\t\n\r\b\f", "\x7f", "😀", "a\xc3", "")
	f.Fuzz(func(t *testing.T, orderID int64, parcelNo, weight int, service string, version int, name, line1, line2, city, postal, country string) {
		p := labels.Parcel{OrderID: orderID, ParcelNo: parcelNo, WeightG: weight, Service: service, LabelVersion: version,
			ShipTo: labels.Address{Name: name, Line1: line1, Line2: line2, City: city, PostalCode: postal, Country: country}}
		own, err := idempotency.Canonical(p)
		require.NoError(t, err)
		general, err := idempotency.Canonical(plainParcel(p))
		require.NoError(t, err)
		require.Equal(t, string(general), string(own))
	})
}

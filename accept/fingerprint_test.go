package accept

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
)

// The fingerprint stored with every key (version 1) is SHA-256 over
// "POST\n/v1/labels\n" and the canonical body. The vector was computed
// outside Go (printf … | sha256sum) over the seed example's canonical form:
// a change of the algorithm that keeps the version would break every stored
// key, and fails here.
func TestFingerprintOfTheSeedExample(t *testing.T) {
	t.Parallel()
	p := labels.Parcel{OrderID: 918273, ParcelNo: 1, WeightG: 1200, Service: "ground", LabelVersion: 1,
		ShipTo: labels.Address{Name: "A. Customer", Line1: "1 Main St", City: "Springfield", PostalCode: "12345", Country: "US"}}
	h, err := Fingerprint(p)
	require.NoError(t, err)
	require.Equal(t, "aa3c7be326356370a457cdb787c3cd63ad0809a3090257669781ff99e0592a6e", hex.EncodeToString(h))
}

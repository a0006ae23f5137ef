package carrier_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
)

func TestDeriveKey(t *testing.T) {
	t.Parallel()

	t.Run("MatchesTheDocumentedDerivation", func(t *testing.T) {
		t.Parallel()
		// printf 'caller-1\0key-1' | openssl dgst -sha256 -binary | base64 | tr '+/' '-_' | tr -d '='
		require.Equal(t, "carrier:saUX3tVE1aNnBoA9LtLgR9GpqlWEpY-QqXYsuBqj5Mo", carrier.DeriveKey("caller-1", "key-1"))
	})

	t.Run("Deterministic", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, carrier.DeriveKey("c", "k"), carrier.DeriveKey("c", "k"))
	})

	t.Run("DistinctPerCallerAndKey", func(t *testing.T) {
		t.Parallel()
		keys := map[string]string{}
		for _, pair := range [][2]string{
			{"caller-1", "key-1"},
			{"caller-1", "key-2"},
			{"caller-2", "key-1"},
			// Without the separator these two would hash the same bytes.
			{"ab", "c"},
			{"a", "bc"},
			{"", "abc"},
			{"abc", ""},
		} {
			k := carrier.DeriveKey(pair[0], pair[1])
			prev, dup := keys[k]
			require.False(t, dup, "%v collides with %s", pair, prev)
			keys[k] = pair[0] + "|" + pair[1]
		}
	})

	t.Run("ValidAndFreeOfTheCallersKey", func(t *testing.T) {
		t.Parallel()
		idem := strings.Repeat("jane.doe@example.com ", 40) // long, personal, with spaces
		k := carrier.DeriveKey("caller-1", idem)
		require.NoError(t, carrier.ValidateKey(k))
		require.Len(t, k, 51)
		require.True(t, strings.HasPrefix(k, carrier.KeyPrefix))
		require.NotContains(t, k, "jane")
	})
}

func TestValidateKey(t *testing.T) {
	t.Parallel()

	for _, ok := range []string{"a", "carrier:abc", strings.Repeat("x", 255), "!~"} {
		require.NoError(t, carrier.ValidateKey(ok), "%q", ok)
	}
	for _, bad := range []string{"", strings.Repeat("x", 256), "has space", "tab\there", "é", "nul\x00", "del\x7f"} {
		err := carrier.ValidateKey(bad)
		require.ErrorIs(t, err, carrier.ErrInvalidKey, "%q", bad)
	}
}

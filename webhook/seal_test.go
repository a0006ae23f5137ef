package webhook_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/webhook"
)

func newKey(t *testing.T) (string, webhook.SecretKey) {
	t.Helper()
	raw := make([]byte, 32)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	s := base64.StdEncoding.EncodeToString(raw)
	k, err := webhook.ParseSecretKey(s)
	require.NoError(t, err)
	require.True(t, k.Set())
	return s, k
}

// A sealed secret opens with its key for its caller only; without a key
// nothing is sealed.
func TestSealedSecrets(t *testing.T) {
	t.Parallel()
	_, key := newKey(t)
	_, other := newKey(t)
	_, secret, err := webhook.NewSecret()
	require.NoError(t, err)

	stored, sealed, err := key.Seal("shop", secret)
	require.NoError(t, err)
	require.True(t, sealed)
	require.False(t, bytes.Contains(stored, secret), "not stored in the clear")
	again, _, err := key.Seal("shop", secret)
	require.NoError(t, err)
	require.NotEqual(t, stored, again, "a fresh nonce each time")

	got, err := key.Open("shop", stored, true)
	require.NoError(t, err)
	require.Equal(t, secret, got)
	_, err = key.Open("another-caller", stored, true)
	require.Error(t, err, "bound to its caller")
	_, err = other.Open("shop", stored, true)
	require.Error(t, err, "another key")
	_, err = webhook.SecretKey{}.Open("shop", stored, true)
	require.ErrorContains(t, err, "WEBHOOK_SECRET_KEY is not set")

	none := webhook.SecretKey{}
	require.False(t, none.Set())
	raw, sealed, err := none.Seal("shop", secret)
	require.NoError(t, err)
	require.False(t, sealed)
	require.Equal(t, secret, raw)
	got, err = key.Open("shop", raw, false)
	require.NoError(t, err)
	require.Equal(t, secret, got, "a raw secret stays usable once a key is set")

	for _, bad := range []string{"short", base64.StdEncoding.EncodeToString(make([]byte, 16)), "!!!!"} {
		_, err := webhook.ParseSecretKey(bad)
		require.Error(t, err, bad)
	}
	k, err := webhook.ParseSecretKey("")
	require.NoError(t, err)
	require.False(t, k.Set())
}

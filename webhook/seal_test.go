package webhook_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/cli"
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
// nothing is sealed, and with the development allowance a secret is stored
// raw.
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

	dev := webhook.SecretKey{}.AllowingUnsealed()
	require.False(t, dev.Set())
	raw, sealed, err := dev.Seal("shop", secret)
	require.NoError(t, err)
	require.False(t, sealed)
	require.Equal(t, secret, raw)
	got, err = key.AllowingUnsealed().Open("shop", raw, false)
	require.NoError(t, err)
	require.Equal(t, secret, got, "a raw secret opens with the development allowance")

	for _, bad := range []string{"short", base64.StdEncoding.EncodeToString(make([]byte, 16)), "!!!!"} {
		_, err := webhook.ParseSecretKey(bad)
		require.Error(t, err, bad)
	}
	k, err := webhook.ParseSecretKey("")
	require.NoError(t, err)
	require.False(t, k.Set())
}

// Without the development allowance nothing is stored or read raw: the zero
// key refuses to store, and no key opens a raw secret.
func TestUnsealedRefused(t *testing.T) {
	t.Parallel()
	_, key := newKey(t)
	_, secret, err := webhook.NewSecret()
	require.NoError(t, err)

	none := webhook.SecretKey{}
	require.ErrorIs(t, none.CanStore(), webhook.ErrUnsealed)
	_, _, err = none.Seal("shop", secret)
	require.ErrorIs(t, err, webhook.ErrUnsealed)
	for _, k := range []webhook.SecretKey{none, key} {
		_, err = k.Open("shop", secret, false)
		require.ErrorIs(t, err, webhook.ErrUnsealed)
		require.ErrorContains(t, err, "api webhook reseal")
	}
	require.NoError(t, key.CanStore())
	require.NoError(t, none.AllowingUnsealed().CanStore())

	for _, c := range []webhook.SecretKeys{{}, {AllowUnsealed: true}} {
		k, err := c.Parse()
		require.NoError(t, err)
		require.Equal(t, c.AllowUnsealed, k.CanStore() == nil, "%+v", c)
	}
}

// A rotation of WEBHOOK_SECRET_KEY: the previous key opens what it sealed,
// Reseal moves raw and old secrets to the current key and leaves those
// already there; a secret that opens with neither is an error.
func TestResealWithTheNewKey(t *testing.T) {
	t.Parallel()
	oldB64, oldKey := newKey(t)
	newB64, current := newKey(t)
	_, stranger := newKey(t)
	both, err := webhook.SecretKeys{Key: newB64, Old: oldB64}.Parse()
	require.NoError(t, err)
	_, secret, err := webhook.NewSecret()
	require.NoError(t, err)

	underOld, _, err := oldKey.Seal("shop", secret)
	require.NoError(t, err)
	underNew, _, err := current.Seal("shop", secret)
	require.NoError(t, err)
	underStranger, _, err := stranger.Seal("shop", secret)
	require.NoError(t, err)

	got, err := both.Open("shop", underOld, true)
	require.NoError(t, err, "the previous key opens during the rotation")
	require.Equal(t, secret, got)
	_, err = current.Open("shop", underOld, true)
	require.Error(t, err)

	for name, c := range map[string]struct {
		stored []byte
		sealed bool
	}{"old": {underOld, true}, "raw": {secret, false}} {
		out, changed, err := both.Reseal("shop", c.stored, c.sealed)
		require.NoError(t, err, name)
		require.True(t, changed, name)
		got, err := current.Open("shop", out, true)
		require.NoError(t, err, name)
		require.Equal(t, secret, got, name)
		again, changed, err := both.Reseal("shop", out, true)
		require.NoError(t, err, name)
		require.False(t, changed, "%s: idempotent", name)
		require.Equal(t, out, again)
	}
	out, changed, err := both.Reseal("shop", underNew, true)
	require.NoError(t, err)
	require.False(t, changed)
	require.Equal(t, underNew, out)
	_, _, err = both.Reseal("shop", underStranger, true)
	require.ErrorContains(t, err, "neither")
	_, _, err = current.Reseal("shop", underOld, true)
	require.ErrorContains(t, err, "WEBHOOK_SECRET_KEY_OLD is not set")
	_, _, err = webhook.SecretKey{}.Reseal("shop", secret, false)
	require.Error(t, err)

	_, err = webhook.SecretKeys{Old: oldB64}.Parse()
	require.ErrorContains(t, err, "WEBHOOK_SECRET_KEY_OLD is set without WEBHOOK_SECRET_KEY")
	_, err = webhook.SecretKeys{Key: newB64, Old: "short"}.Parse()
	require.ErrorContains(t, err, "WEBHOOK_SECRET_KEY_OLD:")
	_, err = webhook.SecretKeys{Key: "short"}.Parse()
	require.ErrorContains(t, err, "WEBHOOK_SECRET_KEY:")
}

// The api and the worker read the same three variables through the
// binaries' cli.Env; a bad WEBHOOK_ALLOW_UNSEALED is remembered there like
// any other bad value.
func TestSecretKeysFromEnv(t *testing.T) {
	t.Parallel()
	set := map[string]string{"WEBHOOK_SECRET_KEY": "new", "WEBHOOK_SECRET_KEY_OLD": "old", "WEBHOOK_ALLOW_UNSEALED": "true"}
	e := &cli.Env{Getenv: func(k string) string { return set[k] }}
	require.Equal(t, webhook.SecretKeys{Key: "new", Old: "old", AllowUnsealed: true}, webhook.SecretKeysFromEnv(e))
	require.NoError(t, e.Err)

	e = &cli.Env{Getenv: func(string) string { return "" }}
	require.Equal(t, webhook.SecretKeys{}, webhook.SecretKeysFromEnv(e))
	e = &cli.Env{Getenv: func(k string) string { return map[string]string{"WEBHOOK_ALLOW_UNSEALED": "perhaps"}[k] }}
	webhook.SecretKeysFromEnv(e)
	require.ErrorContains(t, e.Err, "WEBHOOK_ALLOW_UNSEALED")
}

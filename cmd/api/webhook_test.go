package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/webhook"
)

// api webhook set|rotate|delete|list: the URL rules at set time (exit 2, one
// line), secrets printed once as the last line and stored to sign, rotation,
// the listing, and delete dropping the undelivered events.
func TestWebhookCommands(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "shop")
	url := pool.Config().ConnString()
	ctx := context.Background()
	strict := map[string]string{"DATABASE_URL": url}
	lenient := map[string]string{"DATABASE_URL": url, "WEBHOOK_ALLOW_INSECURE": "true", "WEBHOOK_ALLOW_PRIVATE": "true"}
	do := func(vars map[string]string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"api", "webhook"}, args...), env(vars), &out, &errb)
		return code, out.String(), errb.String()
	}
	lastLine := func(s string) string {
		lines := strings.Split(strings.TrimSpace(s), "\n")
		return lines[len(lines)-1]
	}

	for _, tc := range []struct {
		vars map[string]string
		url  string
		want string
	}{
		{strict, "http://hooks.example.com/x", "https://"},
		{strict, "ftp://hooks.example.com/x", "https://"},
		{strict, "hooks.example.com/x", "https://"},
		{strict, "https:///x", "no host"},
		{strict, "https://user:pw@hooks.example.com/x", "user info"},
		{strict, "https://127.0.0.1/x", "loopback, private or link-local"},
		{strict, "https://10.1.2.3/x", "loopback, private or link-local"},
		{strict, "https://192.168.0.10:8443/x", "loopback, private or link-local"},
		{strict, "https://169.254.169.254/latest/meta-data", "loopback, private or link-local"},
		{strict, "https://[::1]/x", "loopback, private or link-local"},
		{strict, "https://[fe80::1]/x", "loopback, private or link-local"},
		{strict, "https://[::ffff:10.0.0.1]/x", "loopback, private or link-local"},
		{strict, "https://localhost/x", "resolves to"},
		{map[string]string{"DATABASE_URL": url, "WEBHOOK_ALLOW_PRIVATE": "true"}, "http://127.0.0.1/x", "https://"},
	} {
		code, out, errs := do(tc.vars, "set", "shop", tc.url)
		require.Equal(t, 2, code, tc.url)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errs), "\n")+1, "one line: %q", errs)
		require.Contains(t, errs, tc.want, tc.url)
	}
	code, _, errs := do(lenient, "set", "nobody", "http://127.0.0.1:9/x")
	require.Equal(t, 2, code)
	require.Contains(t, errs, `unknown caller "nobody"`)
	require.Equal(t, 2, func() int { c, _, _ := do(lenient, "set", "shop"); return c }())
	require.Equal(t, 2, func() int { c, _, _ := do(lenient, "rotate", "nobody"); return c }())
	require.Equal(t, 2, func() int { c, _, _ := do(lenient, "delete", "shop"); return c }())

	code, out, errs := do(strict, "set", "shop", "https://hooks.example.com/labels")
	require.Equal(t, 0, code, errs)
	first := lastLine(out)
	require.True(t, strings.HasPrefix(first, "whsec_"), out)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(first, "whsec_"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(raw), 24)
	require.Equal(t, 1, strings.Count(out, "whsec_"))
	stored := dbtest.Scalar[[]byte](t, pool, `SELECT secret FROM webhook_secrets WHERE caller_id = 'shop'`)
	require.Equal(t, raw, stored)

	// Setting again changes the URL and keeps the secret: nothing printed twice.
	code, out, _ = do(lenient, "set", "shop", "http://127.0.0.1:8099/labels")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "whsec_")

	code, out, _ = do(lenient, "rotate", "shop")
	require.Equal(t, 0, code)
	second := lastLine(out)
	require.True(t, strings.HasPrefix(second, "whsec_"))
	require.NotEqual(t, first, second)
	require.Equal(t, 2, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM webhook_secrets WHERE caller_id = 'shop' AND (expires_at IS NULL OR expires_at > now())`))

	code, out, _ = do(lenient, "list")
	require.Equal(t, 0, code)
	require.Equal(t, "shop\thttp://127.0.0.1:8099/labels\tactive\t0\n", out)

	_, err = pool.Exec(ctx, `INSERT INTO webhook_events (request_id, caller_id, type, created_at)
		VALUES ('lr_a', 'shop', 'label_request.succeeded', now()), ('lr_b', 'shop', 'label_request.failed', now())`)
	require.NoError(t, err)
	code, out, _ = do(lenient, "delete", "shop")
	require.Equal(t, 0, code)
	require.Contains(t, out, "2 undelivered events dropped")
	require.Equal(t, 2, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM webhook_events WHERE state = 'dropped' AND drop_reason = 'endpoint_deleted'`))
	require.Zero(t, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM webhook_secrets`))
	code, out, _ = do(lenient, "list")
	require.Equal(t, 0, code)
	require.Empty(t, out)
}

// With WEBHOOK_SECRET_KEY the secrets are stored sealed: not in the clear,
// and they open with the key to the printed secret.
func TestWebhookSecretsSealed(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "shop")
	url := pool.Config().ConnString()
	ctx := context.Background()
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	vars := map[string]string{"DATABASE_URL": url, "WEBHOOK_SECRET_KEY": key}
	for _, args := range [][]string{{"set", "shop", "https://hooks.example.com/x"}, {"rotate", "shop"}} {
		var out bytes.Buffer
		require.Equal(t, 0, run(ctx, append([]string{"api", "webhook"}, args...), env(vars), &out, io.Discard), args)
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		printed := lines[len(lines)-1]
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(printed, "whsec_"))
		require.NoError(t, err)
		var stored []byte
		var sealed bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT secret, sealed FROM webhook_secrets WHERE caller_id = 'shop' ORDER BY secret_id DESC LIMIT 1`).Scan(&stored, &sealed))
		require.True(t, sealed)
		require.False(t, bytes.Contains(stored, raw), "not in the clear")
		k, err := webhook.ParseSecretKey(key)
		require.NoError(t, err)
		opened, err := k.Open("shop", stored, true)
		require.NoError(t, err)
		require.Equal(t, raw, opened)
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/clitest"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/dnstest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/webhook"
)

// The look-ups of `api webhook set` in this package's tests: no test
// depends on real DNS.
func init() {
	resolver = dnstest.Resolver{
		"hooks.example.com": {"93.184.216.34"},
		"localhost":         {"127.0.0.1", "::1"},
		"metadata.test":     {"100.100.100.200"},
		"nat64.test":        {"64:ff9b::a9fe:a9fe"},
		"sixtofour.test":    {"2002:7f00:1::1"},
		"mixed.test":        {"93.184.216.34", "10.0.0.1"},
		"rebind.test":       {"93.184.216.34", "127.0.0.1"},
	}
}

// api webhook set|rotate|delete|list: the URL rules at set time (exit 2, one
// line), secrets printed once as the last line and stored to sign, rotation,
// the listing, and delete dropping the undelivered events.
func TestWebhookCommands(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "shop")
	url := pool.Config().ConnString()
	ctx := context.Background()
	strict := map[string]string{"DATABASE_URL": url, "WEBHOOK_ALLOW_UNSEALED": "true"}
	lenient := map[string]string{"DATABASE_URL": url, "WEBHOOK_ALLOW_INSECURE": "true", "WEBHOOK_ALLOW_PRIVATE": "true", "WEBHOOK_ALLOW_UNSEALED": "true"}
	do := func(vars map[string]string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"api", "webhook"}, args...), clitest.Env(vars), &out, &errb)
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
		{strict, "https://127.0.0.1/x", "not public"},
		{strict, "https://10.1.2.3/x", "not public"},
		{strict, "https://192.168.0.10:8443/x", "not public"},
		{strict, "https://169.254.169.254/latest/meta-data", "not public"},
		{strict, "https://[::1]/x", "not public"},
		{strict, "https://[fe80::1]/x", "not public"},
		{strict, "https://[::ffff:10.0.0.1]/x", "not public"},
		{strict, "https://localhost/x", "is loopback"},
		{strict, "https://mixed.test/x", "resolves to 10.0.0.1"},
		{strict, "https://hooks.invalid/x", "does not resolve"},
		{map[string]string{"DATABASE_URL": url, "WEBHOOK_ALLOW_PRIVATE": "true"}, "http://127.0.0.1/x", "https://"},
		{map[string]string{"DATABASE_URL": url}, "https://hooks.example.com/x", "WEBHOOK_SECRET_KEY is not set"},
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
	require.Zero(t, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM webhook_endpoints`), "nothing refused was stored")
	require.Equal(t, 2, func() int { c, _, _ := do(lenient, "delete", "shop"); return c }())

	code, out, errs := do(strict, "set", "shop", "https://hooks.example.com/labels")
	require.Equal(t, 0, code, errs)
	require.Empty(t, errs, "a public https:// URL needs no allowance: no warning")
	first := lastLine(out)
	require.True(t, strings.HasPrefix(first, "whsec_"), out)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(first, "whsec_"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(raw), 24)
	require.Equal(t, 1, strings.Count(out, "whsec_"))
	stored := dbtest.Scalar[[]byte](t, pool, `SELECT secret FROM webhook_secrets WHERE caller_id = 'shop'`)
	require.Equal(t, raw, stored)

	// Setting again changes the URL and keeps the secret: nothing printed twice.
	code, out, errs = do(lenient, "set", "shop", "http://127.0.0.1:8099/labels")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "whsec_")
	// It needs both allowances, which the workers check again: one line says so.
	require.Equal(t, "api webhook set: warning: this URL needs WEBHOOK_ALLOW_INSECURE=true and WEBHOOK_ALLOW_PRIVATE=true, which every worker must have too, or each delivery is refused\n", errs)
	for url, want := range map[string]string{
		"http://hooks.example.com/labels": "needs WEBHOOK_ALLOW_INSECURE=true, which",
		"https://localhost/labels":        "needs WEBHOOK_ALLOW_PRIVATE=true, which",
	} {
		code, _, errs = do(lenient, "set", "shop", url)
		require.Equal(t, 0, code, url)
		require.Equal(t, 1, strings.Count(errs, "\n"), "one line: %q", errs)
		require.Contains(t, errs, want, url)
	}
	code, _, _ = do(lenient, "set", "shop", "http://127.0.0.1:8099/labels")
	require.Equal(t, 0, code)

	code, out, _ = do(lenient, "rotate", "shop")
	require.Equal(t, 0, code)
	second := lastLine(out)
	require.True(t, strings.HasPrefix(second, "whsec_"))
	require.NotEqual(t, first, second)
	require.Equal(t, 2, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM webhook_secrets WHERE caller_id = 'shop' AND (expires_at IS NULL OR expires_at > now())`))

	const header = "CALLER\tURL\tSTATE\tFAILED_IN_ROW\tWHY_DISABLED\n"
	code, out, _ = do(lenient, "list")
	require.Equal(t, 0, code)
	require.Equal(t, header+"shop\thttp://127.0.0.1:8099/labels\tactive\t0\t\n", out)

	// Disabled: the stored reason and the last attempt's error say why.
	_, err = pool.Exec(ctx, `INSERT INTO webhook_events (request_id, caller_id, type, created_at, state, attempts, last_error, drop_reason, finished_at)
		VALUES ('lr_old', 'shop', 'label_request.succeeded', now() - interval '1 hour', 'dropped', 20, 'an older error', 'exhausted', now() - interval '1 hour'),
		       ('lr_new', 'shop', 'label_request.succeeded', now(), 'dropped', 20, 'webhook: refused to connect to 127.0.0.1:8099: an address that is not public', 'exhausted', now())`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE webhook_endpoints SET state = 'disabled', failures_in_row = 2, disabled_reason = '2 events in a row failed'`)
	require.NoError(t, err)
	code, out, _ = do(lenient, "list")
	require.Equal(t, 0, code)
	require.Equal(t, header+"shop\thttp://127.0.0.1:8099/labels\tdisabled\t2\t2 events in a row failed: webhook: refused to connect to 127.0.0.1:8099: an address that is not public\n", out)
	_, err = pool.Exec(ctx, `DELETE FROM webhook_events`)
	require.NoError(t, err)

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
	require.Equal(t, header, out)
}

// With WEBHOOK_SECRET_KEY the secrets are stored sealed: not in the clear,
// and they open with the key to the printed secret.
func TestWebhookSecretsSealed(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "shop")
	url := pool.Config().ConnString()
	ctx := context.Background()
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	vars := map[string]string{"DATABASE_URL": url, "WEBHOOK_SECRET_KEY": key} // no allowance: a key is enough
	for _, args := range [][]string{{"set", "shop", "https://hooks.example.com/x"}, {"rotate", "shop"}} {
		var out bytes.Buffer
		require.Equal(t, 0, run(ctx, append([]string{"api", "webhook"}, args...), clitest.Env(vars), &out, io.Discard), args)
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

// Every spelling of an inside address, every name that resolves inside, and
// every name that does not resolve: `api webhook set` exits 2 with one line
// and stores nothing, for each.
func TestWebhookSetRefusesInsideHosts(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "shop")
	ctx := context.Background()
	vars := map[string]string{"DATABASE_URL": pool.Config().ConnString(), "WEBHOOK_ALLOW_UNSEALED": "true"}
	for _, host := range []string{
		// loopback, spelled as a resolver or a browser reads it
		"127.0.0.1", "127.1", "127.0.1", "2130706433", "0x7f000001", "0x7f.1", "0177.0.0.1", "017700000001", "0",
		"0.0.0.0", "127.0.0.1.", "2130706433.", "localhost", "localhost.", "LOCALHOST", "api.localhost",
		"１２７.０.０.１", "１２７．０．０．１", "%EF%BC%91%EF%BC%92%EF%BC%97.0.0.1", "ｌｏｃａｌｈｏｓｔ", "localhost%EF%BC%8E",
		"[::1]", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]",
		// the ranges that reach inside
		"100.64.0.1", "100.100.100.200", "0.1.2.3", "198.18.0.1", "198.19.255.255", "192.0.0.170", "240.0.0.1",
		"255.255.255.255", "224.0.0.1", "192.0.2.1", "198.51.100.7", "203.0.113.9", "169.254.169.254", "0xa9fea9fe",
		"10.0.0.1", "172.16.0.1", "192.168.1.1",
		"[64:ff9b::a9fe:a9fe]", "[64:ff9b::7f00:1]", "[64:ff9b::6464:64c8]", "[64:ff9b:1::a9fe:a9fe]",
		"[2002:7f00:1::]", "[2002:a9fe:a9fe::1]", "[2001:0:4136:e378:8000:63bf:80ff:fffe]",
		"[fec0::1]", "[fe80::1]", "[fd00::1]", "[ff02::1]", "[2001:db8::1]", "[::]",
		// names that resolve inside
		"metadata.test", "nat64.test", "sixtofour.test", "mixed.test", "rebind.test",
		// names that do not resolve
		"hooks.invalid", "nowhere.test",
	} {
		var out, errb bytes.Buffer
		code := run(ctx, []string{"api", "webhook", "set", "shop", "https://" + host + "/hooks"}, clitest.Env(vars), &out, &errb)
		require.Equal(t, 2, code, "%s: %s", host, errb.String())
		require.Empty(t, out.String(), host)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errb.String()), "\n")+1, "one line: %q", errb.String())
		msg := errb.String()
		require.True(t, strings.Contains(msg, "not public") || strings.Contains(msg, "does not resolve"), "%s: %s", host, msg)
	}
	require.Zero(t, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM webhook_endpoints`))

	// What is stored is the URL as it was checked: its host normalised.
	var out bytes.Buffer
	require.Equal(t, 0, run(ctx, []string{"api", "webhook", "set", "shop", "https://Hooks.Example.COM.:8443/labels"}, clitest.Env(vars), &out, io.Discard))
	require.Contains(t, out.String(), "webhook endpoint https://hooks.example.com:8443/labels (active)")
	require.Equal(t, "https://hooks.example.com:8443/labels", dbtest.Scalar[string](t, pool, `SELECT url FROM webhook_endpoints`))
}

// A secret is never stored raw unless the setup says it is for development:
// without WEBHOOK_SECRET_KEY, set and rotate exit 2 and store nothing; with
// WEBHOOK_ALLOW_UNSEALED=true they store it raw.
func TestWebhookRefusesUnsealedStorage(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "shop")
	ctx := context.Background()
	url := pool.Config().ConnString()
	noKey := map[string]string{"DATABASE_URL": url}
	dev := map[string]string{"DATABASE_URL": url, "WEBHOOK_ALLOW_UNSEALED": "true"}
	for _, args := range [][]string{{"set", "shop", "https://hooks.example.com/x"}, {"rotate", "shop"}} {
		var out, errb bytes.Buffer
		require.Equal(t, 2, run(ctx, append([]string{"api", "webhook"}, args...), clitest.Env(noKey), &out, &errb), args)
		require.Empty(t, out.String())
		require.Contains(t, errb.String(), "WEBHOOK_SECRET_KEY is not set")
		require.Contains(t, errb.String(), "WEBHOOK_ALLOW_UNSEALED=true")
	}
	require.Zero(t, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM webhook_endpoints`))
	require.Zero(t, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM webhook_secrets`))

	require.Equal(t, 0, run(ctx, []string{"api", "webhook", "set", "shop", "https://hooks.example.com/x"}, clitest.Env(dev), io.Discard, io.Discard))
	require.Equal(t, 2, run(ctx, []string{"api", "webhook", "rotate", "shop"}, clitest.Env(noKey), io.Discard, io.Discard), "an endpoint does not change it")
	require.Equal(t, 0, run(ctx, []string{"api", "webhook", "rotate", "shop"}, clitest.Env(dev), io.Discard, io.Discard))
	require.Equal(t, 2, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM webhook_secrets WHERE NOT sealed`))
}

func randomKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(b)
}

// webhookSecret runs an api webhook command that prints a secret and
// returns the secret's raw bytes.
func webhookSecret(t *testing.T, vars map[string]string, args ...string) []byte {
	t.Helper()
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(context.Background(), append([]string{"api", "webhook"}, args...), clitest.Env(vars), &out, &errb), "%v: %s", args, errb.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(lines[len(lines)-1], "whsec_"))
	require.NoError(t, err)
	return raw
}

// requireAllSealed checks that every stored secret is sealed and opens with
// key alone (no previous key, no allowance) to the secret printed for it.
func requireAllSealed(t *testing.T, pool *pgxpool.Pool, key string, printed map[string][][]byte) {
	t.Helper()
	k, err := webhook.SecretKeys{Key: key}.Parse()
	require.NoError(t, err)
	rows, err := pool.Query(context.Background(), `SELECT caller_id, secret, sealed FROM webhook_secrets ORDER BY secret_id`)
	require.NoError(t, err)
	defer rows.Close()
	got := map[string][][]byte{}
	for rows.Next() {
		var caller string
		var stored []byte
		var sealed bool
		require.NoError(t, rows.Scan(&caller, &stored, &sealed))
		require.True(t, sealed, caller)
		secret, err := k.Open(caller, stored, true)
		require.NoError(t, err, caller)
		got[caller] = append(got[caller], secret)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, printed, got)
}

// api webhook reseal, for a rotation of WEBHOOK_SECRET_KEY and for secrets
// stored raw: in batches, every secret ends sealed with the new key and
// opens to what was printed; a second run changes nothing; a secret that
// opens with neither key is named, left, and makes it exit 1, while the
// others are still re-sealed; without a key it exits 2.
func TestWebhookReseal(t *testing.T) {
	t.Parallel()
	callers := []string{"a", "b", "c", "d", "e", "f", "g"}
	pool := fixture.DB(t, callers...)
	ctx := context.Background()
	url := pool.Config().ConnString()
	oldKey, newKey, strangerKey := randomKey(t), randomKey(t), randomKey(t)
	dev := map[string]string{"DATABASE_URL": url, "WEBHOOK_ALLOW_UNSEALED": "true"}
	withOld := map[string]string{"DATABASE_URL": url, "WEBHOOK_SECRET_KEY": oldKey}
	withNew := map[string]string{"DATABASE_URL": url, "WEBHOOK_SECRET_KEY": newKey}
	rotating := map[string]string{"DATABASE_URL": url, "WEBHOOK_SECRET_KEY": newKey, "WEBHOOK_SECRET_KEY_OLD": oldKey}

	// a, b: raw (a development database going to production); c, d: sealed
	// with the old key; e: with the new one; f: raw, then rotated under the
	// old key; g: sealed with a key nobody has.
	printed := map[string][][]byte{}
	set := func(vars map[string]string, caller string) {
		printed[caller] = append(printed[caller], webhookSecret(t, vars, "set", caller, "https://hooks.example.com/"+caller))
	}
	for _, c := range []string{"a", "b", "f"} {
		set(dev, c)
	}
	for _, c := range []string{"c", "d"} {
		set(withOld, c)
	}
	set(withNew, "e")
	printed["f"] = append(printed["f"], webhookSecret(t, withOld, "rotate", "f"))
	set(map[string]string{"DATABASE_URL": url, "WEBHOOK_SECRET_KEY": strangerKey}, "g")
	require.Equal(t, 3, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM webhook_secrets WHERE NOT sealed`))

	var out, errb bytes.Buffer
	require.Equal(t, 2, run(ctx, []string{"api", "webhook", "reseal"}, clitest.Env(dev), &out, &errb))
	require.Contains(t, errb.String(), "WEBHOOK_SECRET_KEY, which is not set")
	require.Equal(t, 2, run(ctx, []string{"api", "webhook", "reseal", "--batch", "0"}, clitest.Env(rotating), io.Discard, io.Discard))
	require.Equal(t, 3, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM webhook_secrets WHERE NOT sealed`), "nothing changed")

	out.Reset()
	errb.Reset()
	require.Equal(t, 1, run(ctx, []string{"api", "webhook", "reseal", "--batch", "2"}, clitest.Env(rotating), &out, &errb))
	require.Equal(t, "webhook secrets: 6 re-sealed with WEBHOOK_SECRET_KEY, 1 already were\n", out.String())
	require.Equal(t, 1, strings.Count(strings.TrimSpace(errb.String()), "\n")+1, "one line: %q", errb.String())
	require.Contains(t, errb.String(), "open with neither WEBHOOK_SECRET_KEY nor WEBHOOK_SECRET_KEY_OLD")
	require.Contains(t, errb.String(), "g (secret ")

	// g's endpoint goes (the operator sets it anew); the rest is done.
	require.Equal(t, 0, run(ctx, []string{"api", "webhook", "delete", "g"}, clitest.Env(rotating), io.Discard, io.Discard))
	delete(printed, "g")
	requireAllSealed(t, pool, newKey, printed)
	before := dbtest.Scalar[[]byte](t, pool, `SELECT string_agg(secret, '' ORDER BY secret_id) FROM webhook_secrets`)

	out.Reset()
	require.Equal(t, 0, run(ctx, []string{"api", "webhook", "reseal", "--batch", "3"}, clitest.Env(rotating), &out, io.Discard))
	require.Equal(t, "webhook secrets: 0 re-sealed with WEBHOOK_SECRET_KEY, 7 already were\n", out.String())
	out.Reset()
	require.Equal(t, 0, run(ctx, []string{"api", "webhook", "reseal"}, clitest.Env(withNew), &out, io.Discard), "the old key is no longer needed")
	require.Equal(t, "webhook secrets: 0 re-sealed with WEBHOOK_SECRET_KEY, 7 already were\n", out.String())
	require.Equal(t, before, dbtest.Scalar[[]byte](t, pool, `SELECT string_agg(secret, '' ORDER BY secret_id) FROM webhook_secrets`), "idempotent: nothing rewritten")
	requireAllSealed(t, pool, newKey, printed)
}

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/devdb"
)

// TestDemo runs the whole demo, as `go tool task demo` does, against a
// database of its own, and checks the three answers the issue asks it to show.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ./cmd/... and starts the real binaries; skipped with -short")
	}
	t.Parallel()
	name := "labels_demo_test_" + strings.ToLower(rand.Text()[:8])
	t.Cleanup(func() { dropTestDatabase(t, name) })

	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"demo", "--database", name}, os.Getenv, &stdout, &stderr)
	out := stdout.String()
	require.Equal(t, 0, code, "stderr:\n%s\nstdout:\n%s", stderr.String(), out)

	i202 := strings.Index(out, "< HTTP/1.1 202 Accepted")
	i201 := strings.Index(out, "< HTTP/1.1 201 Created")
	i422 := strings.Index(out, "< HTTP/1.1 422 Unprocessable Entity")
	require.True(t, 0 <= i202 && i202 < i201 && i201 < i422, "202, then 201, then 422, in this order:\n%s", out)

	accepted, replay, reused := out[i202:i201], out[i201:i422], out[i422:]
	require.Contains(t, accepted, "< Location: /v1/label-requests/lr_")
	require.Contains(t, accepted, "< Retry-After: 1")
	require.Contains(t, accepted, `"status": "succeeded"`, "polled until it succeeded")
	require.NotContains(t, accepted, "Idempotent-Replayed", "the first answer is not a replay")

	require.Contains(t, replay, "< Idempotent-Replayed: true")
	require.Contains(t, replay, "< Location: /v1/labels/lbl_")
	require.Contains(t, replay, `"tracking_no": "GRD000918273"`)

	require.Contains(t, reused, "< Content-Type: application/problem+json")
	require.Contains(t, reused, `"code": "idempotency_key_reused"`)
	require.Contains(t, reused, `"purchases": 1`, "the carrier sold one label")
	require.Contains(t, reused, "$ reconcile --date ")
	require.Contains(t, reused, "stopped, exit 0")
	require.Contains(t, reused, "Demo OK")

	for _, key := range []string{"Idempotency-Key: label:918273:1:v1", "> POST /v1/labels"} {
		require.Equal(t, 3, strings.Count(out, key), "%q once per POST", key)
	}
	// The webhook: delivered to the demo's receiver, verified, the secret masked.
	require.Contains(t, out, "$ WEBHOOK_ALLOW_INSECURE=true WEBHOOK_ALLOW_PRIVATE=true WEBHOOK_ALLOW_UNSEALED=true api webhook set fulfilment http://127.0.0.1:")
	require.Contains(t, out, "> webhook-id: msg_lr_")
	require.Contains(t, out, "> webhook-signature: v1,")
	require.Contains(t, out, "client.VerifyWebhook(secret, header, body, now): OK")
	require.Contains(t, accepted, "< Idempotency-Key-Expires: ")
	// The label's document, through the API: the PDF, then 304 for its ETag.
	require.Regexp(t, `(?s)> GET /v1/labels/lbl_[^/\n]+/document\n.*< HTTP/1.1 200 OK\n< Content-Type: application/pdf\n< Content-Length: \d+\n< ETag: "[0-9a-f]+"\n`, accepted)
	require.Regexp(t, `(?s)> If-None-Match: "[0-9a-f]+"\n.*< HTTP/1.1 304 Not Modified\n`, accepted)
	require.Contains(t, accepted, "bytes of PDF that print tracking number GRD000918273")
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "whsec_") {
			require.True(t, strings.HasSuffix(l, "…"), "the secret is masked: %q", l)
		}
		if strings.Contains(l, "Bearer ") {
			require.True(t, strings.HasSuffix(l, "…"), "the token is masked: %q", l)
		}
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "Usage: demo"},
		{[]string{"--database", "labels"}, 2, "must be labels_demo"},
		{[]string{"--database", "labels_demo; DROP"}, 2, "must be labels_demo"},
		{[]string{"--bin", "/nonexistent"}, 2, "not a directory"},
		{[]string{"extra"}, 2, "unexpected arguments"},
		{[]string{"--nope"}, 2, "flag provided but not defined"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"demo"}, tc.args...), func(string) string { return "" }, &stdout, &stderr)
		require.Equal(t, tc.code, code, "%v", tc.args)
		require.Contains(t, stdout.String()+stderr.String(), tc.want, "%v", tc.args)
	}
}

func dropTestDatabase(t *testing.T, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	server, err := devdb.Ensure(ctx, devdb.Options{URL: os.Getenv("DATABASE_URL")})
	if err != nil {
		t.Logf("dropping %s: %v", name, err)
		return
	}
	if err := devdb.DropScratch(ctx, server, name, "labels_demo"); err != nil {
		t.Logf("dropping %s: %v", name, err)
	}
}

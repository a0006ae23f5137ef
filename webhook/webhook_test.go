package webhook_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/webhook"
)

// The signature of Standard Webhooks' own test vector, one per secret in
// the order given.
func TestSignature(t *testing.T) {
	t.Parallel()
	key, err := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)
	const want = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	body := []byte(`{"test": 2432232314}`)
	require.Equal(t, want, webhook.Signature("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, [][]byte{key}))
	other := []byte("another key of twenty-four bytes")
	both := strings.Fields(webhook.Signature("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, [][]byte{other, key}))
	require.Len(t, both, 2)
	require.Equal(t, want, both[1])
	require.NotEqual(t, want, both[0])
}

func TestNewSecret(t *testing.T) {
	t.Parallel()
	printed, raw, err := webhook.NewSecret()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(printed, "whsec_"))
	decoded, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(printed, "whsec_"))
	require.NoError(t, err)
	require.Equal(t, raw, decoded)
	require.GreaterOrEqual(t, len(raw), 24)
	again, _, err := webhook.NewSecret()
	require.NoError(t, err)
	require.NotEqual(t, printed, again)
}

func TestForbidden(t *testing.T) {
	t.Parallel()
	for _, a := range []string{"127.0.0.1", "127.8.9.10", "::1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "fd00::1",
		"169.254.169.254", "fe80::1", "0.0.0.0", "::", "::ffff:127.0.0.1", "::ffff:192.168.0.1", "224.0.0.1", "ff02::1"} {
		require.True(t, webhook.Forbidden(netip.MustParseAddr(a)), a)
	}
	for _, a := range []string{"8.8.8.8", "93.184.216.34", "172.32.0.1", "2606:4700::1111", "::ffff:1.1.1.1"} {
		require.False(t, webhook.Forbidden(netip.MustParseAddr(a)), a)
	}
}

// The delivery client refuses a forbidden address when it dials, whatever
// the URL named; with private hosts allowed it connects. It follows no
// redirect.
func TestClientChecksTheAddressDialled(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	byName := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)

	strict := webhook.NewClient(5*time.Second, webhook.Policy{AllowInsecure: true})
	for _, u := range []string{srv.URL, byName} {
		_, err := strict.Post(u, "application/json", nil)
		require.Error(t, err, u)
		require.True(t, errors.Is(err, webhook.ErrForbiddenAddress), "%s: %v", u, err)
	}
	require.Zero(t, hits.Load())

	lenient := webhook.NewClient(5*time.Second, webhook.Policy{AllowInsecure: true, AllowPrivate: true})
	resp, err := lenient.Post(byName+"/moved", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode, "the redirect is the answer")
	require.Equal(t, int32(1), hits.Load())
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.NoError(t, webhook.CheckURL(ctx, "https://93.184.216.34/hooks", webhook.Policy{}))
	require.NoError(t, webhook.CheckURL(ctx, "https://hooks.invalid/hooks", webhook.Policy{}), "a name that does not resolve now is checked at delivery")
	require.NoError(t, webhook.CheckURL(ctx, "http://127.0.0.1:8080/x", webhook.Policy{AllowInsecure: true, AllowPrivate: true}))
	for _, u := range []string{"http://93.184.216.34/", "https://10.0.0.1/", "https://localhost/", "https://[::1]/", "/relative", "https://#frag", "https://93.184.216.34/#f"} {
		require.Error(t, webhook.CheckURL(ctx, u, webhook.Policy{}), u)
	}
}

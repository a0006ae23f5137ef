package webhook_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dnstest"
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

// notPublic is every address the policy must refuse, by the range it stands
// for: each reaches, or may reach, inside.
var notPublic = []string{
	// IPv4: private, loopback, link-local and the rest of the
	// special-purpose blocks that are not globally reachable.
	"127.0.0.1", "127.8.9.10", "10.0.0.1", "172.16.5.4", "172.31.255.255", "192.168.1.1",
	"169.254.169.254",
	"100.64.0.1", "100.100.100.200", "100.127.255.255", // CGNAT, shared address space
	"0.0.0.0", "0.1.2.3", // 0.0.0.0/8
	"198.18.0.1", "198.19.255.255", // benchmarking 198.18.0.0/15
	"192.0.0.1", "192.0.0.170", // IETF protocol assignments 192.0.0.0/24
	"240.0.0.1", "250.1.2.3", "255.255.255.254", // reserved 240.0.0.0/4
	"255.255.255.255",              // broadcast
	"224.0.0.1", "239.255.255.250", // multicast
	"192.0.2.1", "198.51.100.1", "203.0.113.1", // documentation
	"192.88.99.1", // 6to4 relay anycast
	// IPv6 outside 2000::/3.
	"::1", "::", "fd00::1", "fc00::1", "fe80::1", "fec0::1", "fefe::1", "ff02::1", "ff0e::1", "100::1", "5f00::1",
	"fe80::1%eth0",
	// IPv4-mapped and IPv4-compatible forms.
	"::ffff:127.0.0.1", "::ffff:192.168.0.1", "::ffff:169.254.169.254", "::ffff:100.100.100.200", "::ffff:0.0.0.0",
	"::127.0.0.1", "::169.254.169.254", "::10.0.0.1", "::8.8.8.8",
	// NAT64: the IPv4 address inside is checked; the local-use prefix is never public.
	"64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b::6464:64c8", "64:ff9b::",
	"64:ff9b:1::a9fe:a9fe", "64:ff9b:1::808:808",
	// 6to4: the IPv4 address in bits 16-47.
	"2002:7f00:1::", "2002:a9fe:a9fe::1", "2002:a00:1::1", "2002:6464:64c8::1", "2002::1",
	// Teredo: server 65.54.227.120 with client 127.0.0.1 (inverted), and a private server.
	"2001:0:4136:e378:8000:63bf:80ff:fffe", "2001:0:a00:1:8000:63bf:f7f7:f7f7",
	// The rest of the IETF block, documentation.
	"2001:2::1", "2001:10::1", "2001:db8::1", "3fff::1",
}

// public is a control of each kind: the policy lets these through.
var public = []string{
	"8.8.8.8", "93.184.216.34", "172.32.0.1", "100.63.255.255", "100.128.0.1", "198.17.255.255", "198.20.0.1",
	"223.255.255.254", "1.1.1.1", "192.0.3.1",
	"2606:4700::1111", "2a00:1450:4001::200e", "::ffff:1.1.1.1",
	"64:ff9b::808:808",                     // NAT64 of 8.8.8.8
	"2002:808:808::1",                      // 6to4 of 8.8.8.8
	"2001:0:4136:e378:8000:63bf:f7f7:f7f7", // Teredo: server 65.54.227.120, client 8.8.8.8
}

func TestPublic(t *testing.T) {
	t.Parallel()
	for _, a := range notPublic {
		require.False(t, webhook.Public(netip.MustParseAddr(a)), a)
		require.True(t, webhook.Forbidden(netip.MustParseAddr(a)), a)
	}
	for _, a := range public {
		require.True(t, webhook.Public(netip.MustParseAddr(a)), a)
	}
	require.False(t, webhook.Public(netip.Addr{}))
}

// A host is read as a resolver or a browser reads it: every spelling of an
// address is that address; names are folded to lower-case ASCII.
func TestParseHost(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"127.0.0.1": "127.0.0.1", "127.1": "127.0.0.1", "127.0.1": "127.0.0.1", "2130706433": "127.0.0.1",
		"0x7f000001": "127.0.0.1", "0X7F000001": "127.0.0.1", "0x7f.1": "127.0.0.1", "0177.0.0.1": "127.0.0.1",
		"0177.0.0.01": "127.0.0.1", "017700000001": "127.0.0.1", "0": "0.0.0.0", "0x": "0.0.0.0",
		"127.0.0.1.": "127.0.0.1", "2130706433.": "127.0.0.1", "169.254.43518": "169.254.169.254",
		"１２７.０.０.１": "127.0.0.1", "１２７．０．０．１": "127.0.0.1", "１２７。０。０。１": "127.0.0.1",
		"0xa9fea9fe": "169.254.169.254", "134744072": "8.8.8.8",
		"::1": "[::1]", "0:0:0:0:0:0:0:1": "[::1]", "::ffff:127.0.0.1": "[::ffff:127.0.0.1]",
		"localhost": "localhost", "localhost.": "localhost", "LOCALHOST": "localhost", "ｌｏｃａｌｈｏｓｔ": "localhost",
		"localhost．": "localhost", "Hooks.Example.COM.": "hooks.example.com", "bücher.example": "xn--bcher-kva.example",
		"hooks_1.example.com": "hooks_1.example.com",
	} {
		h, err := webhook.ParseHost(in)
		require.NoError(t, err, in)
		require.Equal(t, want, h.String(), in)
	}
	for _, bad := range []string{"1.2.3.4.5", "256.0.0.1", "1.2.3.256", "1.2.65536", "08.0.0.1", "4294967296",
		"foo.123", "a..b", ".", "..", "example.com..", "::1::2"} {
		_, err := webhook.ParseHost(bad)
		require.Error(t, err, bad)
	}
}

// The delivery client refuses, at every connection, an address that is not
// public: a name that resolves to one (the resolver injected) and a literal
// one; the receiver gets nothing. With private hosts allowed the same name
// connects, through the same resolver. It follows no redirect.
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
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)

	for _, a := range append(notPublic, "127.0.0.1") {
		res := dnstest.Resolver{"inside.test": {a}, "mixed.test": {"93.184.216.34", a}}
		strict := webhook.NewClient(5*time.Second, webhook.Policy{AllowInsecure: true, Resolver: res})
		urls := []string{"http://inside.test:" + port + "/", "http://mixed.test:" + port + "/"}
		if netip.MustParseAddr(a).Zone() == "" {
			urls = append(urls, "http://"+net.JoinHostPort(a, port)+"/")
		}
		for _, u := range urls {
			_, err := strict.Post(u, "application/json", nil)
			require.Error(t, err, u)
			require.True(t, errors.Is(err, webhook.ErrForbiddenAddress), "%s: %v", u, err)
		}
	}
	require.Zero(t, hits.Load())

	// The check of each address dialled, on its own.
	strict := webhook.Policy{}
	for _, a := range notPublic {
		require.ErrorIs(t, strict.Control("tcp", net.JoinHostPort(a, "443"), nil), webhook.ErrForbiddenAddress, a)
	}
	for _, a := range public {
		require.NoError(t, strict.Control("tcp", net.JoinHostPort(a, "443"), nil), a)
	}

	res := dnstest.Resolver{"receiver.test": {"127.0.0.1"}}
	lenient := webhook.NewClient(5*time.Second, webhook.Policy{AllowInsecure: true, AllowPrivate: true, Resolver: res})
	resp, err := lenient.Post("http://receiver.test:"+port+"/moved", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode, "the redirect is the answer")
	require.Equal(t, int32(1), hits.Load())
	_, err = lenient.Post("http://nowhere.test:"+port+"/", "application/json", nil)
	require.Error(t, err, "a name the resolver does not know")
	require.Equal(t, int32(1), hits.Load())

	// http:// at delivery, from a worker without WEBHOOK_ALLOW_INSECURE (the
	// endpoint was set by an api that had it): refused before any connection.
	secure := webhook.NewClient(5*time.Second, webhook.Policy{AllowPrivate: true, Resolver: res})
	_, err = secure.Post("http://receiver.test:"+port+"/", "application/json", nil)
	require.ErrorIs(t, err, webhook.ErrInsecureURL)
	require.Equal(t, int32(1), hits.Load(), "nothing was sent")
}

// The URL rules at set time: every spelling of an inside address, every name
// that resolves inside, and every name that does not resolve, are refused;
// what is accepted comes back with its host normalised.
func TestCheckURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	res := dnstest.Resolver{
		"hooks.example.com": {"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"},
		"metadata.test":     {"100.100.100.200"},
		"nat64.test":        {"64:ff9b::a9fe:a9fe"},
		"mixed.test":        {"93.184.216.34", "10.0.0.1"},
		"localhost":         {"93.184.216.34"}, // refused by name, whatever resolves
		"empty.test":        {},
	}
	strict := webhook.Policy{Resolver: res}
	for in, want := range map[string]string{
		"https://93.184.216.34/hooks":            "https://93.184.216.34/hooks",
		"https://134744072:8443/x?a=1":           "https://8.8.8.8:8443/x?a=1",
		"https://Hooks.Example.COM./labels":      "https://hooks.example.com/labels",
		"https://ｈｏｏｋｓ.example.com/labels":       "https://hooks.example.com/labels",
		"https://[2606:4700::1111]:8443/x":       "https://[2606:4700::1111]:8443/x",
		"https://[64:ff9b::808:808]/x":           "https://[64:ff9b::808:808]/x",
		"https://hooks.example.com/a%2Fb?c=d#":   "https://hooks.example.com/a%2Fb?c=d",
		"https://hooks.example.com:443/path/x/y": "https://hooks.example.com:443/path/x/y",
	} {
		got, err := webhook.CheckURL(ctx, in, strict)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	var refused []string
	for _, a := range notPublic {
		h := a
		if strings.Contains(a, ":") {
			h = "[" + strings.ReplaceAll(a, "%", "%25") + "]"
		}
		refused = append(refused, "https://"+h+"/x")
	}
	refused = append(refused, "https://127.1/", "https://2130706433/", "https://0x7f000001/", "https://0177.0.0.1/",
		"https://0/", "https://127.0.0.1./", "https://localhost./", "https://localhost/", "https://LocalHost/",
		"https://api.localhost/", "https://１２７.０.０.１/", "https://%EF%BC%91%EF%BC%92%EF%BC%97.0.0.1/", "https://ｌｏｃａｌｈｏｓｔ/",
		"https://0xa9fea9fe/latest/meta-data", "https://169.254.43518/", "https://100.100.100.200/", "https://metadata.test/",
		"https://nat64.test/", "https://mixed.test/", "https://[::ffff:7f00:1]/")
	for _, u := range refused {
		_, err := webhook.CheckURL(ctx, u, strict)
		require.ErrorIs(t, err, webhook.ErrForbiddenAddress, u)
	}
	for _, u := range []string{"https://hooks.invalid/x", "https://nowhere.test/x", "https://empty.test/x"} {
		_, err := webhook.CheckURL(ctx, u, strict)
		require.ErrorContains(t, err, "does not resolve", u)
	}
	for _, u := range []string{"http://93.184.216.34/", "/relative", "https://#frag", "https://93.184.216.34/#f",
		"https://user@93.184.216.34/", "https://1.2.3.4.5/", "https://256.1.1.1/", "https://a..b/"} {
		_, err := webhook.CheckURL(ctx, u, strict)
		require.Error(t, err, u)
	}

	// Private hosts allowed: inside addresses pass; a name must still resolve.
	lenient := webhook.Policy{AllowInsecure: true, AllowPrivate: true, Resolver: res}
	got, err := webhook.CheckURL(ctx, "http://127.1:8080/x", lenient)
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:8080/x", got)
	_, err = webhook.CheckURL(ctx, "http://metadata.test/x", lenient)
	require.NoError(t, err)
	_, err = webhook.CheckURL(ctx, "http://nowhere.test/x", lenient)
	require.ErrorContains(t, err, "does not resolve")
}

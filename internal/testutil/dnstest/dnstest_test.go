package dnstest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// A known name answers its addresses, by family for ip4 and ip6; an unknown
// one is a not-found DNS error; a known name without addresses answers none.
func TestResolver(t *testing.T) {
	r := Resolver{"both.test": {"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"}, "empty.test": {}}
	ctx := context.Background()
	for network, want := range map[string][]string{
		"ip":  {"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"},
		"ip4": {"93.184.216.34"},
		"ip6": {"2606:2800:220:1:248:1893:25c8:1946"},
	} {
		got, err := r.LookupNetIP(ctx, network, "both.test")
		require.NoError(t, err)
		var ws []netip.Addr
		for _, w := range want {
			ws = append(ws, netip.MustParseAddr(w))
		}
		require.Equal(t, ws, got, network)
	}
	got, err := r.LookupNetIP(ctx, "ip", "empty.test")
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = r.LookupNetIP(ctx, "ip", "nowhere.test")
	var dnsErr *net.DNSError
	require.True(t, errors.As(err, &dnsErr) && dnsErr.IsNotFound, "%v", err)
}

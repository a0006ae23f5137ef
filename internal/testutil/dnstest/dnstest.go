// Package dnstest answers host look-ups from a map, so that no test depends
// on real DNS.
package dnstest

import (
	"context"
	"net"
	"net/netip"
)

// Resolver maps a host name to its addresses, written as netip parses them
// ("93.184.216.34", "::1", "fe80::1%eth0"); any other name does not exist. It
// is a webhook.Resolver: a look-up of network "ip4" or "ip6" answers only
// the addresses of that family, "ip" all of them.
type Resolver map[string][]string

// LookupNetIP answers host from the map; an address that does not parse
// panics (a mistake in the test).
func (r Resolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	addrs, ok := r[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, s := range addrs {
		a := netip.MustParseAddr(s)
		if network == "ip" || (network == "ip4") == a.Unmap().Is4() {
			out = append(out, a)
		}
	}
	return out, nil
}

package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// ErrForbiddenAddress is wrapped by the errors of an address the policy refuses.
var ErrForbiddenAddress = errors.New("address that is not public (loopback, private, shared, link-local, reserved or special-purpose)")

// Resolver looks host names up; *net.Resolver is one. Tests inject their
// own, so that no test depends on real DNS.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// The IPv4 blocks of IANA's special-purpose registry that are not globally
// reachable, and the multicast, reserved and broadcast space above them. A
// public IPv4 address is any other one.
var v4NotPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network" (0.0.0.0 reaches the host itself)
	netip.MustParsePrefix("10.0.0.0/8"),      // private
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (CGNAT; cloud metadata services live here)
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback
	netip.MustParsePrefix("169.254.0.0/16"),  // link-local (cloud metadata at 169.254.169.254)
	netip.MustParsePrefix("172.16.0.0/12"),   // private
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation (TEST-NET-1)
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast (deprecated)
	netip.MustParsePrefix("192.168.0.0/16"),  // private
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation (TEST-NET-2)
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation (TEST-NET-3)
	netip.MustParsePrefix("224.0.0.0/3"),     // multicast 224/4, reserved 240/4, broadcast
}

// IPv6: only the global unicast space, 2000::/3, is public, less the blocks
// below; the transition forms that carry an IPv4 address are public only when
// that address is.
var (
	v6Global  = netip.MustParsePrefix("2000::/3")
	v6NAT64   = netip.MustParsePrefix("64:ff9b::/96") // well-known NAT64 prefix (RFC 6052): the last 32 bits
	v6Teredo  = netip.MustParsePrefix("2001::/32")    // Teredo: server and (inverted) client IPv4
	v6IETF    = netip.MustParsePrefix("2001::/23")    // IETF protocol assignments (benchmarking, ORCHID, ...)
	v6SixToFo = netip.MustParsePrefix("2002::/16")    // 6to4: the IPv4 address in bits 16-47
	v6NotPub  = []netip.Prefix{
		netip.MustParsePrefix("2001:db8::/32"), // documentation
		netip.MustParsePrefix("3fff::/20"),     // documentation (RFC 9637)
	}
)

// Public says whether addr is one a webhook may be delivered to: a global
// unicast address, nothing else (an allow-list). IPv4: any address outside
// the special-purpose blocks that are not globally reachable (private, shared
// 100.64.0.0/10, loopback, link-local, 0.0.0.0/8, 192.0.0.0/24, 198.18.0.0/15,
// the documentation blocks, multicast, 240.0.0.0/4 and broadcast). IPv6: only
// 2000::/3, less documentation and the IETF block; the forms that carry an
// IPv4 address (IPv4-mapped ::ffff:a.b.c.d, NAT64 64:ff9b::/96, 6to4
// 2002::/16, Teredo 2001::/32) only when every IPv4 address they carry is
// public. So loopback, unspecified, IPv4-compatible ::a.b.c.d, unique-local
// fc00::/7, link-local fe80::/10, site-local fec0::/10, multicast, the local
// NAT64 prefix 64:ff9b:1::/48 and a zoned address are never public.
func Public(addr netip.Addr) bool {
	if !addr.IsValid() || addr.Zone() != "" {
		return false
	}
	if addr.Is4() {
		return public4(addr)
	}
	b := addr.As16()
	switch {
	case addr.Is4In6():
		return public4(addr.Unmap())
	case v6NAT64.Contains(addr):
		return public4(netip.AddrFrom4([4]byte(b[12:16])))
	case !v6Global.Contains(addr):
		return false
	case v6Teredo.Contains(addr):
		server := netip.AddrFrom4([4]byte(b[4:8]))
		client := netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
		return public4(server) && public4(client)
	case v6IETF.Contains(addr):
		return false
	case v6SixToFo.Contains(addr):
		return public4(netip.AddrFrom4([4]byte(b[2:6])))
	}
	for _, p := range v6NotPub {
		if p.Contains(addr) {
			return false
		}
	}
	return true
}

func public4(addr netip.Addr) bool {
	for _, p := range v4NotPublic {
		if p.Contains(addr) {
			return false
		}
	}
	return true
}

// Forbidden says whether addr is not [Public]: an address that reaches, or
// may reach, inside.
func Forbidden(addr netip.Addr) bool { return !Public(addr) }

// Host is a URL's host as a resolver or a browser reads it: an address, or a
// name in lower-case ASCII (IDNA) without a trailing dot.
type Host struct {
	Addr netip.Addr // valid when the host is an address
	Name string     // otherwise
}

// String returns the host as a URL carries it (an IPv6 address bracketed).
func (h Host) String() string {
	switch {
	case h.Addr.Is6():
		return "[" + h.Addr.String() + "]"
	case h.Addr.IsValid():
		return h.Addr.String()
	}
	return h.Name
}

// ParseHost reads a URL's host (url.URL.Hostname: no brackets, no port) as a
// resolver or a browser would interpret it, so that a check of the result
// holds for what is dialled. A name is mapped as the HTTP client maps it
// (IDNA's lookup profile, which folds full-width letters, digits and dots to
// ASCII) and lower-cased, and one trailing dot is dropped. A name whose last
// label is a number is an IPv4 address in any of the forms inet_aton and the
// WHATWG URL standard accept: one to four parts, each decimal, octal (a
// leading 0) or hexadecimal (0x), the last filling the bytes left (127.1,
// 2130706433, 0x7f000001, 0177.0.0.1 and 0 are all addresses). An invalid
// number is an error, not a name.
func ParseHost(host string) (Host, error) {
	if strings.Contains(host, ":") {
		a, err := netip.ParseAddr(host)
		if err != nil {
			return Host{}, fmt.Errorf("the host %q is not a valid IPv6 address", host)
		}
		return Host{Addr: a}, nil
	}
	name := host
	if !isASCII(name) {
		n, err := idna.Lookup.ToASCII(name)
		if err != nil {
			return Host{}, fmt.Errorf("the host %q is not a valid name: %v", host, err)
		}
		name = n
	}
	name = strings.ToLower(name)
	if strings.HasSuffix(name, ".") {
		name = name[:len(name)-1]
	}
	if name == "" {
		return Host{}, errors.New("the URL has no host")
	}
	labels := strings.Split(name, ".")
	if slices.Contains(labels, "") {
		return Host{}, fmt.Errorf("the host %q has an empty label", host)
	}
	if endsInNumber(labels[len(labels)-1]) {
		a, ok := parseIPv4(labels)
		if !ok {
			return Host{}, fmt.Errorf("the host %q is not a valid IPv4 address", host)
		}
		return Host{Addr: a}, nil
	}
	return Host{Name: name}, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// endsInNumber is the WHATWG URL standard's test: the last label is all
// digits, or a number in one of the IPv4 part forms (0x7f).
func endsInNumber(last string) bool {
	if last != "" && strings.Trim(last, "0123456789") == "" {
		return true
	}
	_, ok := parseIPv4Part(last)
	return ok
}

// parseIPv4Part reads one part of an IPv4 address: decimal, octal with a
// leading 0, hexadecimal with 0x (an empty 0x is 0).
func parseIPv4Part(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	base := 10
	switch {
	case len(s) >= 2 && (s[:2] == "0x" || s[:2] == "0X"):
		s, base = s[2:], 16
	case len(s) >= 2 && s[0] == '0':
		s, base = s[1:], 8
	}
	if s == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(s, base, 64)
	return n, err == nil
}

// parseIPv4 reads one to four parts, as inet_aton does: the last part fills
// the bytes the others leave.
func parseIPv4(labels []string) (netip.Addr, bool) {
	if len(labels) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, l := range labels {
		n, ok := parseIPv4Part(l)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(labels)-1 {
			if n > 255 {
				return netip.Addr{}, false
			}
			v |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(5-len(labels))) {
			return netip.Addr{}, false
		}
		v |= n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// resolveTimeout bounds the look-up of a host at set time.
const resolveTimeout = 10 * time.Second

// checkHost applies the address policy to h: an address must be public; a
// name must resolve, to public addresses only. localhost and its subdomains
// are loopback whatever a resolver says (RFC 6761). With private hosts
// allowed only the resolution is required.
func (p Policy) checkHost(ctx context.Context, h Host) error {
	const allow = "allowed only with WEBHOOK_ALLOW_PRIVATE=true"
	if h.Addr.IsValid() {
		if !p.AllowPrivate && Forbidden(h.Addr) {
			return fmt.Errorf("the host %s is an %w (%s)", h.Addr, ErrForbiddenAddress, allow)
		}
		return nil
	}
	if !p.AllowPrivate && (h.Name == "localhost" || strings.HasSuffix(h.Name, ".localhost")) {
		return fmt.Errorf("the host %s is loopback, an %w (%s)", h.Name, ErrForbiddenAddress, allow)
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := p.resolver().LookupNetIP(ctx, "ip", h.Name)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no address")
	}
	if err != nil {
		return fmt.Errorf("the host %s does not resolve: %v", h.Name, err)
	}
	if p.AllowPrivate {
		return nil
	}
	for _, a := range addrs {
		if Forbidden(a) {
			return fmt.Errorf("the host %s resolves to %s, an %w (%s)", h.Name, a, ErrForbiddenAddress, allow)
		}
	}
	return nil
}

func (p Policy) resolver() Resolver {
	if p.Resolver != nil {
		return p.Resolver
	}
	return net.DefaultResolver
}

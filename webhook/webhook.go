// Package webhook is what the completion webhooks share between the command
// that registers an endpoint (cmd/api) and the job that delivers to it
// (package jobs): the Standard Webhooks 1.0 secrets and signature, the
// sealing of the secrets at rest (SecretKey), the URL rules with their
// address allow-list (Public: global unicast only, the IPv4 address inside
// NAT64, 6to4, Teredo and IPv4-mapped forms checked too) and host
// normalisation (ParseHost), and the HTTP client that enforces the rules
// again on every address it dials. It keeps no SQL: the webhook tables
// belong to package postgres.
package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/labelkit/labels/internal/tracing"
)

// SecretPrefix starts every signing secret (Standard Webhooks).
const SecretPrefix = "whsec_"

// secretBytes is the size of a new secret (Standard Webhooks: 24 to 64).
const secretBytes = 32

// DefaultRotationOverlap is WEBHOOK_ROTATION_OVERLAP's default: how long an
// endpoint's previous secrets keep signing after a new one is added.
const DefaultRotationOverlap = 24 * time.Hour

// NewSecret returns a fresh secret as printed (whsec_ + base64) and its raw
// bytes, the HMAC key.
func NewSecret() (string, []byte, error) {
	raw := make([]byte, secretBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", nil, err
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(raw), raw, nil
}

// Signature returns the webhook-signature header value for one delivery:
// "v1,<base64 HMAC-SHA256(secret, id.timestamp.body)>" for each secret, in
// the given order, separated by spaces.
func Signature(id string, timestamp int64, body []byte, secrets [][]byte) string {
	parts := make([]string, 0, len(secrets))
	for _, s := range secrets {
		m := hmac.New(sha256.New, s)
		m.Write([]byte(id))
		m.Write([]byte{'.'})
		m.Write(strconv.AppendInt(nil, timestamp, 10))
		m.Write([]byte{'.'})
		m.Write(body)
		parts = append(parts, "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	}
	return strings.Join(parts, " ")
}

// Policy is what the URL rules allow besides public HTTPS hosts, and the
// resolver they look names up with.
type Policy struct {
	AllowInsecure bool // WEBHOOK_ALLOW_INSECURE: http:// too
	AllowPrivate  bool // WEBHOOK_ALLOW_PRIVATE: hosts that are not Public too
	// Resolver looks names up at set time and at every connection; nil is
	// net.DefaultResolver.
	Resolver Resolver
}

// CheckURL applies the URL rules to raw and returns the URL to store, its
// host normalised (ParseHost): absolute https:// (http:// when insecure is
// allowed), a host, no user info, no fragment; a host that is a public
// address (Public), or a name that resolves now, to public addresses only
// (unless private hosts are allowed, when it need only resolve). Every
// delivery checks again the address it dials.
func CheckURL(ctx context.Context, raw string, p Policy) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("the URL does not parse: %v", err)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && p.AllowInsecure:
	case u.Scheme == "http":
		return "", errors.New("the URL must be https:// (http:// only with WEBHOOK_ALLOW_INSECURE=true)")
	default:
		return "", errors.New("the URL must be absolute https://")
	}
	if u.Host == "" || u.Hostname() == "" {
		return "", errors.New("the URL has no host")
	}
	if u.User != nil {
		return "", errors.New("the URL may not carry user info")
	}
	if u.Fragment != "" {
		return "", errors.New("the URL may not carry a fragment")
	}
	h, err := ParseHost(u.Hostname())
	if err != nil {
		return "", err
	}
	if err := p.checkHost(ctx, h); err != nil {
		return "", err
	}
	host := h.String()
	if port := u.Port(); port != "" {
		host += ":" + port
	}
	u.Host = host
	return u.String(), nil
}

// Control refuses a connection to an address that is not Public unless p
// allows private hosts. It runs on the very address dialled, after name
// resolution, so a name that resolved to a public address at registration
// and to an inside one now (DNS rebinding) is refused too.
func (p Policy) Control(_, address string, _ syscall.RawConn) error {
	if p.AllowPrivate {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook: dialing %q: %w", address, err)
	}
	if Forbidden(ap.Addr()) {
		return fmt.Errorf("webhook: refused to connect to %s: an %w (this worker allows it only with WEBHOOK_ALLOW_PRIVATE=true)", ap.Addr(), ErrForbiddenAddress)
	}
	return nil
}

// minDialShare is the least time each address of a name gets to connect
// when several share an attempt's deadline (as net.Dialer does).
const minDialShare = 2 * time.Second

// dialContext returns the delivery client's dial function: a name is looked
// up with p's resolver, refused when any of its addresses is not Public
// (unless p allows private hosts), and its addresses are dialled in turn,
// each with a share of the time left; every dial goes through d, whose
// Control checks the address once more.
func (p Policy) dialContext(d *net.Dialer) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		if _, err := netip.ParseAddr(host); err == nil {
			return d.DialContext(ctx, network, address)
		}
		ipNet := "ip"
		switch network {
		case "tcp4":
			ipNet = "ip4"
		case "tcp6":
			ipNet = "ip6"
		}
		addrs, err := p.resolver().LookupNetIP(ctx, ipNet, host)
		if err == nil && len(addrs) == 0 {
			err = fmt.Errorf("webhook: %s has no address", host)
		}
		if err != nil {
			return nil, err
		}
		if !p.AllowPrivate {
			for _, a := range addrs {
				if Forbidden(a) {
					return nil, fmt.Errorf("webhook: refused to connect to %s (%s): an %w (this worker allows it only with WEBHOOK_ALLOW_PRIVATE=true)", host, a, ErrForbiddenAddress)
				}
			}
		}
		var firstErr error
		for i, a := range addrs {
			dctx, cancel := ctx, context.CancelFunc(func() {})
			if deadline, ok := ctx.Deadline(); ok && i < len(addrs)-1 {
				share := max(time.Until(deadline)/time.Duration(len(addrs)-i), minDialShare)
				dctx, cancel = context.WithTimeout(ctx, share)
			}
			c, err := d.DialContext(dctx, network, net.JoinHostPort(a.String(), port))
			cancel()
			if err == nil {
				return c, nil
			}
			if firstErr == nil {
				firstErr = err
			}
			if ctx.Err() != nil {
				break
			}
		}
		return nil, firstErr
	}
}

// NewClient returns the delivery client: timeout per attempt, no proxy (the
// address checked is the receiver's), redirects not followed (a 3xx is the
// answer, and a failure), names looked up with p's resolver and every
// address dialled checked by p.Control.
func NewClient(timeout time.Duration, p Policy) *http.Client {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: p.Control}
	return &http.Client{
		Timeout: timeout,
		// With tracing on: a span per attempt, and traceparent.
		Transport: tracing.Transport(schemeCheck{policy: p, next: &http.Transport{
			Proxy:                 nil,
			DialContext:           p.dialContext(d),
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		}}),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// ErrInsecureURL is wrapped by the error of a delivery to an http:// URL
// that the policy does not allow (WEBHOOK_ALLOW_INSECURE is not set).
var ErrInsecureURL = errors.New("http:// endpoint")

// schemeCheck refuses, before any connection, a request to an http:// URL
// unless the policy allows it: the URL rules hold at every delivery, not
// only at set (an endpoint stored by an api with WEBHOOK_ALLOW_INSECURE,
// delivered by a worker without it).
type schemeCheck struct {
	policy Policy
	next   http.RoundTripper
}

func (c schemeCheck) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "https" && !(r.URL.Scheme == "http" && c.policy.AllowInsecure) {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, fmt.Errorf("webhook: refused to send to an %w (this worker allows it only with WEBHOOK_ALLOW_INSECURE=true)", ErrInsecureURL)
	}
	return c.next.RoundTrip(r)
}

// Event types.
const (
	TypeSucceeded = "label_request.succeeded"
	TypeFailed    = "label_request.failed"
)

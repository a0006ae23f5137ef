// Package webhook is what the completion webhooks share between the command
// that registers an endpoint (cmd/api) and the job that delivers to it
// (package jobs): the Standard Webhooks 1.0 secrets and signature, the URL
// rules, and the HTTP client that enforces them again on the address it
// actually dials. It keeps no SQL: the webhook tables belong to package
// postgres.
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
)

// SecretPrefix starts every signing secret (Standard Webhooks).
const SecretPrefix = "whsec_"

// secretBytes is the size of a new secret (Standard Webhooks: 24 to 64).
const secretBytes = 32

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

// Policy is what the URL rules allow besides public HTTPS hosts.
type Policy struct {
	AllowInsecure bool // WEBHOOK_ALLOW_INSECURE: http:// too
	AllowPrivate  bool // WEBHOOK_ALLOW_PRIVATE: loopback, private and link-local hosts too
}

// ErrForbiddenAddress is wrapped by the errors of an address the policy refuses.
var ErrForbiddenAddress = errors.New("loopback, private or link-local address")

// Forbidden says whether addr is loopback, private (RFC 1918, RFC 4193),
// link-local, unspecified or multicast: addresses that reach inside.
func Forbidden(addr netip.Addr) bool {
	addr = addr.Unmap()
	return addr.IsLoopback() || addr.IsPrivate() || addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() ||
		addr.IsInterfaceLocalMulticast() || addr.IsUnspecified() || addr.IsMulticast()
}

// CheckURL applies the URL rules to raw: absolute https:// (http:// when
// insecure is allowed), a host, no user info, and unless private hosts are
// allowed, a host that is not, and does not resolve to, a forbidden address.
// A name that does not resolve now is accepted: every delivery checks the
// address it dials.
func CheckURL(ctx context.Context, raw string, p Policy) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("the URL does not parse: %v", err)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && p.AllowInsecure:
	case u.Scheme == "http":
		return errors.New("the URL must be https:// (http:// only with WEBHOOK_ALLOW_INSECURE=true)")
	default:
		return errors.New("the URL must be absolute https://")
	}
	if u.Host == "" || u.Hostname() == "" {
		return errors.New("the URL has no host")
	}
	if u.User != nil {
		return errors.New("the URL may not carry user info")
	}
	if u.Fragment != "" {
		return errors.New("the URL may not carry a fragment")
	}
	if p.AllowPrivate {
		return nil
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		if Forbidden(a) {
			return fmt.Errorf("the host %s is a %w (allowed only with WEBHOOK_ALLOW_PRIVATE=true)", host, ErrForbiddenAddress)
		}
		return nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if Forbidden(a) {
			return fmt.Errorf("the host %s resolves to %s, a %w (allowed only with WEBHOOK_ALLOW_PRIVATE=true)", host, a, ErrForbiddenAddress)
		}
	}
	return nil
}

// Control refuses a connection to a forbidden address unless p allows
// private hosts. It runs after name resolution, on the very address dialled,
// so a name that resolved to a public address at registration and to an
// inside one now (DNS rebinding) is refused too.
func (p Policy) Control(_, address string, _ syscall.RawConn) error {
	if p.AllowPrivate {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook: dialing %q: %w", address, err)
	}
	if Forbidden(ap.Addr()) {
		return fmt.Errorf("webhook: refused to connect to %s: %w", ap.Addr(), ErrForbiddenAddress)
	}
	return nil
}

// NewClient returns the delivery client: timeout per attempt, no proxy (the
// address checked is the receiver's), redirects not followed (a 3xx is the
// answer, and a failure), and every dial checked by p.Control.
func NewClient(timeout time.Duration, p Policy) *http.Client {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: p.Control}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           d.DialContext,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Event types.
const (
	TypeSucceeded = "label_request.succeeded"
	TypeFailed    = "label_request.failed"
)

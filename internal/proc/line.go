package proc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Stream names where a line was written.
type Stream string

// The two streams of a process.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// TailLines is how many of the last lines an error about a process quotes.
const TailLines = 20

// Line is one line a process wrote.
type Line struct {
	// Stream is where it was written.
	Stream Stream
	// Text is the line without its newline.
	Text string
	// At is when it was read.
	At time.Time
}

// Fields returns the members of the line when it is a JSON object (a log line
// of LOG_FORMAT=json), nil otherwise.
func (l Line) Fields() map[string]any {
	t := strings.TrimSpace(l.Text)
	if !strings.HasPrefix(t, "{") {
		return nil
	}
	var m map[string]any
	if json.Unmarshal([]byte(t), &m) != nil {
		return nil
	}
	return m
}

// Field returns the member name of a JSON line as a string ("" when the line is
// not JSON or has no such member; numbers and booleans are formatted).
func (l Line) Field(name string) string {
	v, ok := l.Fields()[name]
	if !ok || v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// Msg returns the message of a JSON log line: its "msg" member (zerolog,
// slog), or "message".
func (l Line) Msg() string {
	if m := l.Field("msg"); m != "" {
		return m
	}
	return l.Field("message")
}

// hostPort finds an address in a plain-text log line: an IPv4 or bracketed
// IPv6 address or localhost, then a port, or a bare ":port".
var hostPort = regexp.MustCompile(`(\[[0-9A-Fa-f:.]*\]|\d{1,3}(?:\.\d{1,3}){3}|localhost)?:(\d{1,5})\b`)

// ListenAddr reports whether l announces a listen address under the message
// msg, and returns that address in a form to dial. A JSON line matches when its
// message equals msg and it has an "addr" (or "address") member; a plain-text
// line matches when it contains msg and an address. An unspecified host
// (":8090", "0.0.0.0", "[::]") becomes 127.0.0.1; a URL becomes its host:port.
func ListenAddr(l Line, msg string) (string, bool) {
	if f := l.Fields(); f != nil {
		if l.Msg() != msg {
			return "", false
		}
		for _, k := range []string{"addr", "address"} {
			if s, ok := f[k].(string); ok && s != "" {
				return dialable(s)
			}
		}
		return "", false
	}
	if !strings.Contains(l.Text, msg) {
		return "", false
	}
	for _, m := range hostPort.FindAllStringSubmatchIndex(l.Text, -1) {
		start, end := m[0], m[1]
		// A bare ":port" must stand alone: not the ":00" of a time of day.
		if m[2] < 0 && ((start > 0 && isWordByte(l.Text[start-1])) || (end < len(l.Text) && l.Text[end] == ':')) {
			continue
		}
		if a, ok := dialable(l.Text[start:end]); ok {
			return a, true
		}
	}
	return "", false
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func dialable(s string) (string, bool) {
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return "", false
		}
		s = u.Host
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || port == "" || port == "0" {
		return "", false
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), true
}

// Lines returns a copy of every line read so far, in order of arrival.
func (p *Process) Lines() []Line {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Line(nil), p.lines...)
}

// Output returns what the process wrote to s so far, one line each.
func (p *Process) Output(s Stream) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.lines {
		if l.Stream == s {
			b.WriteString(l.Text)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Tail returns the last n lines the process wrote, both streams.
func (p *Process) Tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tailLocked(n)
}

func (p *Process) tailLocked(n int) string {
	from := max(0, len(p.lines)-n)
	var b strings.Builder
	for _, l := range p.lines[from:] {
		b.WriteString(l.Text)
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}

// LastLines joins the last n lines of s (a command's output, its surrounding
// space trimmed) with " | ", for an error message of one line.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// WaitLine returns the first line, among those read so far and those still to
// come, for which match returns true. It fails when ctx ends or the process
// exits first.
func (p *Process) WaitLine(ctx context.Context, match func(Line) bool) (Line, error) {
	next := 0 // counts every line ever read, the dropped ones too
	for {
		p.mu.Lock()
		from := max(0, next-p.dropped)
		lines, changed := p.lines[from:], p.changed
		next = p.dropped + from
		exited := p.state != nil
		p.mu.Unlock()
		for _, l := range lines {
			if match(l) {
				return l, nil
			}
		}
		next += len(lines)
		if exited {
			return Line{}, fmt.Errorf("the line awaited did not come: %w", p.exitErrOrExited())
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Line{}, fmt.Errorf("%s: the line awaited did not come: %w; last output:\n%s", p.name, context.Cause(ctx), p.Tail(TailLines))
		}
	}
}

// WaitMsg waits for the JSON log line whose message is msg (see [Line.Msg]).
func (p *Process) WaitMsg(ctx context.Context, msg string) (Line, error) {
	return p.WaitLine(ctx, func(l Line) bool { return l.Msg() == msg })
}

// WaitListening waits for the log line that announces the listen address
// under msg (see [ListenAddr]), and returns the address.
func (p *Process) WaitListening(ctx context.Context, msg string) (string, error) {
	var addr string
	_, err := p.WaitLine(ctx, func(l Line) bool {
		a, ok := ListenAddr(l, msg)
		addr = a
		return ok
	})
	if err != nil {
		return "", fmt.Errorf("waiting for %q with an address: %w", msg, err)
	}
	return addr, nil
}

// exitErrOrExited describes an exit even when it was a clean one.
func (p *Process) exitErrOrExited() error {
	if err := p.exitErr(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return &ExitError{Name: p.name, State: p.state, Tail: p.tailLocked(TailLines)}
}

// lineWriter splits what a process writes into lines.
type lineWriter struct {
	p       *Process
	stream  Stream
	partial []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			w.partial = append(w.partial, b...)
			break
		}
		w.partial = append(w.partial, b[:i]...)
		w.emit()
		b = b[i+1:]
	}
	return n, nil
}

// flush emits a last line that had no newline; called once the process exited.
func (w *lineWriter) flush() {
	if len(w.partial) > 0 {
		w.emit()
	}
}

func (w *lineWriter) emit() {
	l := Line{Stream: w.stream, Text: strings.TrimSuffix(string(w.partial), "\r"), At: time.Now()}
	w.partial = w.partial[:0]
	p := w.p
	p.mu.Lock()
	p.lines = append(p.lines, l)
	if p.keep > 0 && len(p.lines) >= 2*p.keep {
		n := len(p.lines) - p.keep
		p.lines = append([]Line(nil), p.lines[n:]...)
		p.dropped += n
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	if p.onLine != nil {
		// One call at a time, though stdout and stderr are read apart.
		p.onLineMu.Lock()
		p.onLine(l)
		p.onLineMu.Unlock()
	}
}

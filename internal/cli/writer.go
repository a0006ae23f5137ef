package cli

import (
	"fmt"
	"io"
	"net/url"
	"sync"
	"time"
)

// LockedWriter serialises writes to W from several goroutines (a command's
// own output and the lines of the processes it runs).
type LockedWriter struct {
	mu sync.Mutex
	W  io.Writer
}

// Write implements io.Writer.
func (l *LockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.W.Write(b)
}

// Redact hides the password of a URL; "?" when it does not parse.
func Redact(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return "?"
}

// Progress returns a function that writes one progress line to w, after the
// time of day (15:04:05).
func Progress(w io.Writer) func(format string, args ...any) {
	return func(format string, a ...any) {
		fmt.Fprintf(w, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
}

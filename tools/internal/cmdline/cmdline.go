// Package cmdline is what the commands under tools/ share beyond
// internal/cli and internal/fleet: a writer several goroutines share, and
// the usage text made from a command's flags, a URL with its password hidden.
package cmdline

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
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

// Usage is a command's --help: head, then every flag of fs with its usage
// and, unless the usage names one, its default, then tail.
func Usage(fs *flag.FlagSet, head, tail string) string {
	var b strings.Builder
	b.WriteString(head)
	fs.VisitAll(func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && !strings.Contains(f.Usage, "(default") {
			def = " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(&b, "  --%s\n\t%s%s\n", f.Name, f.Usage, def)
	})
	return b.String() + tail
}

// Redact hides the password of a URL; "?" when it does not parse.
func Redact(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return "?"
}

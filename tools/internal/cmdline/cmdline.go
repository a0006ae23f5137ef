// Package cmdline is what the commands under tools/ share beyond
// internal/cli and internal/fleet: a writer several goroutines share.
package cmdline

import (
	"io"
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

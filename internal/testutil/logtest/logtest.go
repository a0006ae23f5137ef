// Package logtest collects the JSON log lines a service writes from its
// goroutines, for tests that check what is logged.
package logtest

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Buffer is an io.Writer for a zerolog logger, safe for concurrent writes.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines parses every line written so far as a JSON object, keeping those
// whose message is message (all when it is empty).
func (l *Buffer) Lines(t testing.TB, message string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("logtest: %v: %s", err, line)
		}
		if message == "" || m["message"] == message {
			out = append(out, m)
		}
	}
	return out
}

// WaitAddr waits up to within for a line whose message is message (a
// listener's announcement) and returns its addr field.
func (l *Buffer) WaitAddr(t testing.TB, message string, within time.Duration) string {
	t.Helper()
	var addr string
	require.Eventually(t, func() bool {
		for line := range strings.SplitSeq(l.String(), "\n") {
			var m struct{ Message, Addr string }
			if json.Unmarshal([]byte(line), &m) == nil && m.Message == message && m.Addr != "" {
				addr = m.Addr
				return true
			}
		}
		return false
	}, within, 10*time.Millisecond, "no %q line with an addr: %s", message, l)
	return addr
}

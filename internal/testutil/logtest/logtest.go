// Package logtest collects the JSON log lines a service writes from its
// goroutines, for tests that check what is logged.
package logtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/cli"
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

// Serve runs a server command in the background, its log to the returned
// Buffer, and returns the addr of its log line message (its listener's
// announcement). When the test ends the command is stopped, as by a signal
// (its context is cancelled), and must exit 0.
func Serve(t testing.TB, run cli.Run, args []string, getenv func(string) string, message string) (addr string, logs *Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs = &Buffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, getenv, io.Discard, logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("%s exited %d: %s", args[0], code, logs)
			}
		case <-time.After(time.Minute):
			t.Errorf("%s did not stop", args[0])
		}
	})
	return logs.WaitAddr(t, message, 30*time.Second), logs
}

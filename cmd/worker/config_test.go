package main

import (
	"testing"

	"github.com/labelkit/labels/internal/testutil/envdoc"
)

// Every variable the worker's configuration reads is in docs/operations.md's
// table for worker, and every row for worker is read. --help stops after the
// configuration is read, before anything starts.
func TestConfigMatchesTheTable(t *testing.T) {
	t.Parallel()
	envdoc.CheckHelp(t, "worker", run)
}

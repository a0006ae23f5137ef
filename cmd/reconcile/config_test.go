package main

import (
	"testing"

	"github.com/labelkit/labels/internal/testutil/envdoc"
)

// Every variable reconcile's configuration reads (its run and reconcile
// void) is in docs/operations.md's table for reconcile, and every row for
// reconcile is read. --help stops after the configuration is read.
func TestConfigMatchesTheTable(t *testing.T) {
	t.Parallel()
	envdoc.CheckHelp(t, "reconcile", run, "void")
}

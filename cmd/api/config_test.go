package main

import (
	"testing"

	"github.com/labelkit/labels/internal/testutil/envdoc"
)

// Every variable the API's configuration reads is in docs/operations.md's
// table for api, and every row for api is read. --help stops after the
// configuration is read, before anything starts.
func TestConfigMatchesTheTable(t *testing.T) {
	t.Parallel()
	envdoc.CheckHelp(t, "api", run)
}

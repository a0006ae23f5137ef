package main

import (
	"testing"

	"github.com/labelkit/labels/internal/testutil/clitest"
)

// --version prints one line, the binary's name and its build's version, and
// exits 0 without reading the environment or touching anything.
func TestVersion(t *testing.T) {
	t.Parallel()
	clitest.Version(t, "worker", run)
}

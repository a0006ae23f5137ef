package sdk_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The SDK's module asks nothing of its callers but the standard library and
// Go 1.22: its go.mod requires no module, and no package it builds, tests
// included, is outside the standard library and the SDK itself. (A caller's
// go.sum gains no line from it; docs: README, "The Go client".)
func TestClientModuleIsStandardLibraryOnly(t *testing.T) {
	t.Parallel()
	mod, err := os.ReadFile("../../client/go.mod")
	require.NoError(t, err)
	var directives []string
	for _, l := range strings.Split(string(mod), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "//") {
			directives = append(directives, l)
		}
	}
	require.Equal(t, []string{"module github.com/labelkit/labels/client", "go 1.22"}, directives)
	_, err = os.Stat("../../client/go.sum")
	require.True(t, os.IsNotExist(err), "client/go.sum exists: the SDK needs no checksums")

	cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...")
	cmd.Dir = "../../client"
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "[") {
			continue // the test variant's annotation
		}
		require.Contains(t, []string{
			"github.com/labelkit/labels/client", "github.com/labelkit/labels/client_test", "github.com/labelkit/labels/client.test",
		}, pkg, "the SDK builds a package outside the standard library")
	}
}

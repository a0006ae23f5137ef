// Package clitest checks what every binary's run function promises on its
// command line, the same way for each binary.
package clitest

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/labelkit/labels/internal/cli"
)

// Env is the environment a test gives a run function: the variables of m,
// every other one unset.
func Env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// Version runs `binary --version` through run: one line on stdout, the
// binary's name and its build's version, exit 0, nothing on stderr, and no
// environment read.
func Version(t *testing.T, binary string, run cli.Run) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	getenv := func(string) string { t.Error("--version read the environment"); return "" }
	if code := run(context.Background(), []string{binary, "--version"}, getenv, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	out := stdout.String()
	if !strings.HasPrefix(out, binary+" ") || strings.Count(out, "\n") != 1 || !strings.Contains(out, "(revision ") {
		t.Errorf("stdout %q: want one line, %s VERSION (revision …) GOVERSION", out, binary)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr %q", stderr.String())
	}
}

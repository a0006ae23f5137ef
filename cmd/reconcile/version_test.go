package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// --version prints one line, the binary's name and its build's version, and
// exits 0 without reading the environment or touching anything.
func TestVersion(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	getenv := func(string) string { t.Error("--version read the environment"); return "" }
	if code := run(context.Background(), []string{"reconcile", "--version"}, getenv, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	out := stdout.String()
	if !strings.HasPrefix(out, "reconcile ") || strings.Count(out, "\n") != 1 || !strings.Contains(out, "(revision ") {
		t.Errorf("stdout %q: want one line, reconcile VERSION (revision …) GOVERSION", out)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr %q", stderr.String())
	}
}

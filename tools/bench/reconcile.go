package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/labelkit/labels/internal/devdb"
	"github.com/labelkit/labels/internal/proc"
	"github.com/labelkit/labels/tools/internal/scratch"
)

// The reconciliation figure is BenchmarkReconcile's own (in
// reconcile_bench_test.go of this package, reused as it is, not measured
// again here): a synthetic invoice from the carrier simulator against a
// database seeded with the labels, intents and keys behind it, timing
// reconcile.Run. It runs as `go test -bench` in a database of its own on the
// same server; the seeding is not timed.

var (
	reconcileLinesPerSec = regexp.MustCompile(`(?m)^BenchmarkReconcile\S*\s+\d+\s+(\d+) ns/op\s+([0-9.]+) lines/s`)
)

func (h *harness) reconcile(ctx context.Context) error {
	r := &Reconcile{Lines: h.cfg.ReconcileLines}
	h.res.Reconcile = r
	name := h.dbName + "_rec"
	dbURL, err := devdb.EnsureDatabase(ctx, h.serverURL, name)
	if err != nil {
		r.Error = err.Error()
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if !h.cfg.Keep {
			_ = scratch.Drop(dctx, h.serverURL, name, scratchPrefix)
		}
	}()
	root, err := proc.ModuleRoot()
	if err != nil {
		r.Error = err.Error()
		return err
	}
	args := []string{"-C", "tools", "test", "./bench", "-run", "^$", "-bench", "^BenchmarkReconcile$", "-benchtime", "1x", "-count", "1", "-timeout", "60m"}
	r.Command = fmt.Sprintf("RECONCILE_BENCH_LINES=%d go %s", h.cfg.ReconcileLines, strings.Join(args, " "))
	h.logf("  %s", r.Command)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "RECONCILE_BENCH_LINES="+strconv.Itoa(h.cfg.ReconcileLines), "RECONCILE_BENCH_DATABASE_URL="+dbURL)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	text := out.String()
	m := reconcileLinesPerSec.FindStringSubmatch(text)
	if err != nil || m == nil {
		r.Output = lastLines(text, 15)
		r.Error = fmt.Sprintf("go test -bench BenchmarkReconcile: %v", err)
		if err == nil {
			r.Error = "go test -bench BenchmarkReconcile printed no lines/s"
		}
		return fmt.Errorf("%s: %s", r.Error, lastLines(text, 5))
	}
	ns, _ := strconv.ParseFloat(m[1], 64)
	r.Seconds = round2(ns / 1e9)
	r.LinesPerSec = round1(atof(m[2]))
	h.logf("  %d lines reconciled in %.1f s: %.0f lines/s", r.Lines, r.Seconds, r.LinesPerSec)
	return nil
}

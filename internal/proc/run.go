package proc

import (
	"context"
	"fmt"
	"strings"
)

// Result is what a command run to its end wrote, and how it ended.
type Result struct {
	// Stdout and Stderr hold what it wrote, one line each.
	Stdout, Stderr string
	// ExitCode is its exit status, or -1 when a signal ended it.
	ExitCode int
}

// LastLine returns the last non-empty line of Stdout (where `api caller add`
// prints the token).
func (r *Result) LastLine() string {
	return lastLine(r.Stdout)
}

// Run runs the executable at path to its end. The error is an [*ExitError]
// when it ended other than with status 0, and the Result is filled in then
// too, so a caller that expects another status (reconcile's 1 for
// discrepancies) checks ExitCode. When ctx ends first the process is stopped
// as [Start] describes.
func Run(ctx context.Context, path string, o *Opts) (*Result, error) {
	p, err := Start(ctx, path, o)
	if err != nil {
		return nil, err
	}
	<-p.Done()
	res := &Result{Stdout: p.Output(Stdout), Stderr: p.Output(Stderr), ExitCode: p.ExitCode()}
	if ctx.Err() != nil {
		return res, fmt.Errorf("%s: %w", p.name, context.Cause(ctx))
	}
	return res, p.exitErr()
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultGrace is how long a process whose [Start] context ended has between
// SIGTERM and SIGKILL when [Opts.Grace] is zero.
const DefaultGrace = 10 * time.Second

// Opts tunes [Start] and [Run].
type Opts struct {
	// Name labels the process in errors and logs; empty means the base name of
	// the executable.
	Name string
	// Args are the command-line arguments, without the program name.
	Args []string
	// Env holds KEY=VALUE pairs on top of the inherited ones; a later pair
	// overrides an earlier one and an inherited one.
	Env []string
	// InheritEnv passes this process's whole environment instead of the short
	// list described in the package documentation.
	InheritEnv bool
	// Dir is the working directory; empty means this process's.
	Dir string
	// OnLine, when set, is called with every line as it is read (to stream a
	// child's log into a test log or a terminal). It must not block for long:
	// the child blocks on a full pipe meanwhile.
	OnLine func(Line)
	// Grace is how long the process has between SIGTERM and SIGKILL when the
	// context given to [Start] ends; zero means [DefaultGrace].
	Grace time.Duration
	// KeepLines, when positive, bounds the lines kept to about the last
	// KeepLines (between KeepLines and twice that): for a long-running child
	// that logs every request, whose lines would otherwise pile up in this
	// process. Lines, Output and Tail then see only those; WaitLine sees
	// every line that arrives while it waits, and the kept ones before.
	KeepLines int
}

// inheritedVars are passed to a child unless [Opts.InheritEnv] is set:
// what a program needs to run and to reach PostgreSQL, nothing that configures
// the project's binaries.
var inheritedVars = []string{"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TZ", "LANG", "GOCOVERDIR", "GORACE", "GOTRACEBACK"}

// inheritedPrefixes are passed like [inheritedVars]: the locale and libpq's
// PG* variables (PGPASSWORD, PGSSLMODE…), which pgx reads too.
var inheritedPrefixes = []string{"LC_", "PG"}

func environ(o *Opts) []string {
	var env []string
	for _, kv := range os.Environ() {
		if o.InheritEnv {
			env = append(env, kv)
			continue
		}
		k, _, _ := strings.Cut(kv, "=")
		keep := false
		for _, v := range inheritedVars {
			keep = keep || k == v
		}
		for _, p := range inheritedPrefixes {
			keep = keep || strings.HasPrefix(k, p)
		}
		if keep {
			env = append(env, kv)
		}
	}
	// os/exec keeps the last value of a duplicated key.
	return append(env, o.Env...)
}

// Process is a started child process and everything it has written so far.
type Process struct {
	name     string
	cmd      *exec.Cmd
	onLine   func(Line)
	onLineMu sync.Mutex

	mu      sync.Mutex
	lines   []Line
	dropped int // lines let go from the front of lines (Opts.KeepLines)
	keep    int
	changed chan struct{} // closed and replaced when a line arrives or the process exits

	done    chan struct{} // closed once the process has exited and its output is read
	state   *os.ProcessState
	waitErr error // from exec.Cmd.Wait, other than a non-zero exit
}

// Start starts the executable at path. The process lives until it exits, is
// stopped, or ctx ends: then it gets SIGTERM, and SIGKILL after [Opts.Grace].
func Start(ctx context.Context, path string, o *Opts) (*Process, error) {
	if o == nil {
		o = &Opts{}
	}
	name := o.Name
	if name == "" {
		name = filepath.Base(path)
	}
	grace := o.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	cmd := exec.CommandContext(ctx, path, o.Args...)
	cmd.Env = environ(o)
	cmd.Dir = o.Dir
	cmd.SysProcAttr = sysProcAttr()
	p := &Process{
		name:    name,
		cmd:     cmd,
		onLine:  o.OnLine,
		keep:    o.KeepLines,
		changed: make(chan struct{}),
		done:    make(chan struct{}),
	}
	stdout := &lineWriter{p: p, stream: Stdout}
	stderr := &lineWriter{p: p, stream: Stderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Cancel = func() error { return p.signal(syscall.SIGTERM) }
	// When ctx ends, exec calls Cancel (SIGTERM) and sends SIGKILL after
	// WaitDelay; it also stops reading WaitDelay after the exit when something
	// the process started still holds its stdout or stderr open.
	cmd.WaitDelay = grace
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() {
		err := cmd.Wait()
		stdout.flush()
		stderr.flush()
		p.mu.Lock()
		p.state = cmd.ProcessState
		var exitErr *exec.ExitError
		if err != nil && !errors.As(err, &exitErr) {
			p.waitErr = err
		}
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Name returns the label of the process.
func (p *Process) Name() string { return p.name }

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and its output has been read.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitCode returns the exit status, or -1 while the process runs or when a
// signal ended it.
func (p *Process) ExitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return -1
	}
	return p.state.ExitCode()
}

// Wait waits for the process to exit and returns nil for exit status 0, an
// [*ExitError] otherwise, or ctx's error when ctx ends first (the process keeps
// running then).
func (p *Process) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.exitErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop sends SIGTERM and waits for the exit; when ctx ends first it sends
// SIGKILL and waits for that. It returns nil when the process exited with
// status 0 (at once or earlier), an [*ExitError] otherwise.
func (p *Process) Stop(ctx context.Context) error {
	if p.Exited() {
		return p.exitErr()
	}
	if err := p.signal(syscall.SIGTERM); err != nil && !p.Exited() {
		return fmt.Errorf("%s: SIGTERM: %w", p.name, err)
	}
	select {
	case <-p.done:
		return p.exitErr()
	case <-ctx.Done():
	}
	_ = p.signal(syscall.SIGKILL)
	<-p.done
	return fmt.Errorf("%s did not exit after SIGTERM (%w), killed: %w", p.name, context.Cause(ctx), p.exitErr())
}

// Kill sends SIGKILL, as a crash would, and waits for the exit. It returns
// nil once the process is gone, however it ended.
func (p *Process) Kill() error {
	if p.Exited() {
		return nil
	}
	if err := p.signal(syscall.SIGKILL); err != nil && !p.Exited() {
		return fmt.Errorf("%s: SIGKILL: %w", p.name, err)
	}
	<-p.done
	return nil
}

// Signal sends sig to the process's group (see the package documentation),
// e.g. SIGSTOP and SIGCONT to stall a process and let it go on. It returns
// [os.ErrProcessDone] once the process has exited.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return os.ErrProcessDone
	}
	return p.signal(sig)
}

func (p *Process) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.state != nil && p.state.Success():
		// Also when Wait reported the cancelled context or output still held
		// open after the exit: the process itself ended well.
		return nil
	case p.state == nil:
		return fmt.Errorf("%s: %w", p.name, p.waitErr)
	}
	return &ExitError{Name: p.name, State: p.state, Tail: p.tailLocked(TailLines)}
}

// ExitError reports a process that ended other than with status 0.
type ExitError struct {
	// Name labels the process.
	Name string
	// State is how it ended.
	State *os.ProcessState
	// Tail is the last lines it wrote, stdout and stderr interleaved.
	Tail string
}

// ExitCode returns the exit status, or -1 when a signal ended the process.
func (e *ExitError) ExitCode() int {
	if e.State == nil {
		return -1
	}
	return e.State.ExitCode()
}

func (e *ExitError) Error() string {
	how := "ended"
	if e.State != nil {
		how = e.State.String() // "exit status 2", "signal: killed"
	}
	if e.Tail == "" {
		return fmt.Sprintf("%s: %s (no output)", e.Name, how)
	}
	return fmt.Sprintf("%s: %s; last output:\n%s", e.Name, how, e.Tail)
}

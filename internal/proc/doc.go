// Package proc starts the project's real binaries as child processes: for
// the fleet launcher (internal/fleet) and through it the tools (demo, bench,
// fleet) and the chaos run, and for the tests that run the binaries (through
// internal/testutil/proctest, which adds the testing.TB wrappers).
//
// It owns no data and knows no binary by name: it builds main packages with the
// go command, starts a binary with a chosen environment, captures everything the
// process writes, and stops it. Where the data comes from: the binaries' own
// JSON log lines (cmd/api, cmd/worker and cmd/carrier log one line per event to
// stderr, LOG_FORMAT=json), read line by line as they arrive.
//
// # Building
//
// [Build] runs `go build -o DIR/ ./cmd/...` (or the packages named in
// [BuildOpts]) once, into a temporary directory, and returns the [Binaries]
// found there. It builds in the main module's directory ([ModuleRoot])
// wherever the caller runs (the tools run in tools/, a module of their own).
// Tests use proctest.BuildT, which builds into the test's temporary
// directory; a package that starts binaries in many tests builds once in
// TestMain with [Build] and removes the directory with [Binaries.Remove].
//
// # Running
//
// [Start] starts a binary and returns a [Process]. The child gets a small
// environment on purpose: only PATH, HOME, the locale, TZ, TMPDIR, the PG*
// variables (so a password in PGPASSWORD keeps working) and the variables of
// [Opts.Env]; a developer's CARRIER_URL or LOG_FORMAT=console does not leak
// into a test. [Opts.InheritEnv] passes the whole environment instead.
//
// Every line the process writes to stdout or stderr is kept as a [Line].
// [Process.WaitLine] waits for a line that matches; [Process.WaitListening]
// waits for the JSON log line that announces the listen address (API_ADDR=127.0.0.1:0
// makes cmd/api log {"msg":"listening","addr":"127.0.0.1:PORT"}) and returns
// that address; [Process.WaitHealthy] polls GET /healthz until it answers 200.
// Each of them gives up as soon as the process exits, with an error that ends
// with the last lines it wrote.
//
// [Run] runs a command to its end (api migrate, api caller add, reconcile) and
// returns what it wrote and its exit code.
//
// # Stopping
//
// [Process.Stop] sends SIGTERM and waits for the exit, and sends SIGKILL when
// its context ends first; [Process.Kill] sends SIGKILL at once (a crash, for
// chaos tests); [Process.Signal] sends any other signal (SIGSTOP to stall a
// worker). Signals go to the child's process group: each child runs in a group
// of its own, so a Ctrl-C in the terminal reaches only the parent, which then
// stops its children in order, instead of every process receiving SIGINT at
// once. On Linux a child also gets SIGKILL when the parent dies, so a killed
// test binary or demo leaves no servers behind.
//
// A process whose [Start] context ends is stopped the same way: SIGTERM, then
// SIGKILL after [Opts.Grace]. proctest.StartT ties a process to a test: it is
// stopped when the test ends, a non-zero exit on that SIGTERM fails the test,
// and a failed test logs the last lines of every process it started.
//
// # Measuring
//
// [ProcessCPU], [TreeCPU] and [SelfCPU] read the CPU seconds a process (and,
// when asked, its reaped children), a process tree, and this process have
// used; [MachineCPU] reads
// the busy and stolen time of all cores and [LoadAverage] the load averages
// (from /proc; zero where it cannot be read). The bench takes two readings
// around a load and reports the difference.
package proc

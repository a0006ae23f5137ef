// Package cmdline is what the commands under tools/ share of their command
// lines: flags parsed into a flag.FlagSet whose own output is silenced, a
// usage text on --help, one line on stderr for a bad flag or a stray
// argument.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
)

// Parse parses args (without the command's name) with fs, whose output it
// discards. It returns false with the exit status when the command is to end
// here: 0 after printing usage to stdout for --help or -h, 2 after one line
// on stderr, named by fs.Name(), for a bad flag or any argument that is not a
// flag.
func Parse(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) (int, bool) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0, false
		}
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q; see %s --help\n", fs.Name(), fs.Args(), fs.Name())
		return 2, false
	}
	return 0, true
}

// LockedWriter serialises writes to W from several goroutines (a command's
// own output and the lines of the processes it runs).
type LockedWriter struct {
	mu sync.Mutex
	W  io.Writer
}

// Write implements io.Writer.
func (l *LockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.W.Write(b)
}

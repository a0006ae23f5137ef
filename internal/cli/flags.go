package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Usage is a command's --help: head, then every flag of fs with its usage
// and, unless the usage names one, its default, then tail.
func Usage(fs *flag.FlagSet, head, tail string) string {
	var b strings.Builder
	b.WriteString(head)
	fs.VisitAll(func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && !strings.Contains(f.Usage, "(default") {
			def = " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(&b, "  --%s\n\t%s%s\n", f.Name, f.Usage, def)
	})
	return b.String() + tail
}

// ParseFlags parses args (without the command's name) with fs, whose own
// output it discards; what follows the flags stays in fs.Args(). It returns
// false with the exit status when the command is to end here: 0 after
// printing usage to stdout for --help or -h, 2 after one line on stderr,
// named by fs.Name(), for a bad flag.
func ParseFlags(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) (int, bool) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0, false
		}
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return 2, false
	}
	return 0, true
}

// Parse is ParseFlags for a command that takes flags only: any argument that
// is not a flag ends it with status 2 and one line on stderr.
func Parse(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) (int, bool) {
	if code, ok := ParseFlags(fs, args, usage, stdout, stderr); !ok {
		return code, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q; see %s --help\n", fs.Name(), fs.Args(), fs.Name())
		return 2, false
	}
	return 0, true
}

// ParseValid is Parse followed by validate, which checks the values the
// flags set: an error from it ends the command with status 2 after one line
// on stderr named by fs.Name().
func ParseValid(fs *flag.FlagSet, args []string, usage string, validate func() error, stdout, stderr io.Writer) (int, bool) {
	if code, ok := Parse(fs, args, usage, stdout, stderr); !ok {
		return code, false
	}
	if err := validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return 2, false
	}
	return 0, true
}

// List parses the comma-separated value s of the flag named flag, each
// element (its surrounding space trimmed) with parse; the error names the
// flag and its whole value.
func List[T any](flag, s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		v, err := parse(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--%s %q: %w", flag, s, err)
		}
		out = append(out, v)
	}
	return out, nil
}

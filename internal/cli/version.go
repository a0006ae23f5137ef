package cli

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// Version describes the running binary from its build information: the
// module's version ("(devel)" for a build from a working tree), the VCS
// revision and commit time the go command stamped (with "+dirty" when the
// tree had changes), and the Go version, e.g.
//
//	api v1.2.0 (revision 1ce1943…, 2026-12-06T04:58:16Z) go1.26.8
//
// A build without VCS information says "revision unknown"; a binary without
// build information at all says "(unknown)".
func Version(name string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return name + " (unknown)"
	}
	return versionOf(name, info)
}

func versionOf(name string, info *debug.BuildInfo) string {
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, at string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	vcs := "revision unknown"
	if rev != "" {
		vcs = "revision " + rev
		if dirty {
			vcs += "+dirty"
		}
		if at != "" {
			vcs += ", " + at
		}
	}
	return strings.TrimSpace(fmt.Sprintf("%s %s (%s) %s", name, version, vcs, info.GoVersion))
}

// PrintVersion reports whether args (a command line, args[0] its name) asks
// for the version: its first argument is --version or -version. If so it
// prints [Version] on w, and the command exits 0.
func PrintVersion(name string, args []string, w io.Writer) bool {
	if len(args) < 2 || (args[1] != "--version" && args[1] != "-version") {
		return false
	}
	fmt.Fprintln(w, Version(name))
	return true
}

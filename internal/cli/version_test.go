package cli

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionOf(t *testing.T) {
	t.Parallel()
	stamped := []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "1ce1943abc"},
		{Key: "vcs.time", Value: "2026-12-06T04:58:16Z"},
		{Key: "vcs.modified", Value: "false"},
	}
	dirty := append(stamped[:3:3], debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	for _, c := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"tagged", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.0"}, Settings: stamped},
			"api v1.2.0 (revision 1ce1943abc, 2026-12-06T04:58:16Z) go1.26.8"},
		{"dirty tree", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: dirty},
			"api (devel) (revision 1ce1943abc+dirty, 2026-12-06T04:58:16Z) go1.26.8"},
		{"no VCS information", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"api (devel) (revision unknown) go1.26.8"},
		{"no version at all", debug.BuildInfo{GoVersion: "go1.26.8"},
			"api (devel) (revision unknown) go1.26.8"},
	} {
		if got := versionOf("api", &c.info); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func TestPrintVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"api", "--version"}, {"api", "-version"}} {
		var out bytes.Buffer
		if !PrintVersion("api", args, &out) {
			t.Fatalf("%q: not taken as a version request", args)
		}
		if !strings.HasPrefix(out.String(), "api ") || !strings.HasSuffix(out.String(), "\n") {
			t.Errorf("%q: printed %q", args, out.String())
		}
	}
	for _, args := range [][]string{{"api"}, {"api", "migrate"}, {"api", "--help"}, nil} {
		var out bytes.Buffer
		if PrintVersion("api", args, &out) || out.Len() != 0 {
			t.Errorf("%q: taken as a version request (%q)", args, out.String())
		}
	}
}

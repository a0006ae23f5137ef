package deploy

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// The units of a replicated PostgreSQL under pg_auto_failover, by the
// pg_autoctl command of systemd/README.md that creates their PGDATA.
var failoverUnits = map[string]string{
	"pgautofailover-monitor.service": "create monitor",
	"pgautofailover-node.service":    "create postgres",
}

// shCommands returns the lines of a Markdown page's ```sh blocks.
func shCommands(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var commands []string
	inBlock := false
	for line := range strings.SplitSeq(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			inBlock = !inBlock && trimmed == "```sh"
		case inBlock:
			commands = append(commands, trimmed)
		}
	}
	require.NotEmpty(t, commands, "%s: its commands in ```sh blocks", path)
	return commands
}

// autoctlCommands returns the pg_autoctl invocations of systemd/README.md:
// the arguments after pg_autoctl.
func autoctlCommands(t *testing.T) [][]string {
	t.Helper()
	var out [][]string
	for _, c := range shCommands(t, "systemd/README.md") {
		f := strings.Fields(c)
		if i := slices.Index(f, "pg_autoctl"); i >= 0 {
			out = append(out, f[i+1:])
		}
	}
	require.NotEmpty(t, out)
	return out
}

// flag returns the value of --name in args.
func flag(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// The pg_auto_failover units run `pg_autoctl run` as postgres on the PGDATA
// the how-to creates, restart always, reload with `pg_autoctl reload`, and
// pass `systemd-analyze verify` without a warning where systemd and
// pg_autoctl are installed. Every pg_autoctl command of the how-to works
// on one of those PGDATA.
func TestPgAutoFailoverUnits(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("systemd/pgautofailover-*.service")
	require.NoError(t, err)
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	require.ElementsMatch(t, slices.Collect(maps.Keys(failoverUnits)), names)

	commands := autoctlCommands(t)
	var pgdatas []string
	for name, create := range failoverUnits {
		u := readUnit(t, filepath.Join("systemd", name))
		svc := u["Service"]
		require.Equal(t, []string{"postgres"}, svc["User"], name)
		require.Equal(t, []string{"/usr/bin/pg_autoctl run"}, svc["ExecStart"], "%s: pg_autoctl runs PostgreSQL itself", name)
		require.Equal(t, []string{"/usr/bin/pg_autoctl reload"}, svc["ExecReload"], name)
		require.Equal(t, []string{"always"}, svc["Restart"], name)
		require.Equal(t, []string{"multi-user.target"}, u["Install"]["WantedBy"], name)
		var pgdata string
		for _, e := range svc["Environment"] {
			if v, ok := strings.CutPrefix(e, "PGDATA="); ok {
				pgdata = v
			}
		}
		require.NotEmpty(t, pgdata, "%s: PGDATA", name)
		pgdatas = append(pgdatas, pgdata)
		created := false
		for _, c := range commands {
			if strings.Join(c[:min(2, len(c))], " ") == create {
				require.Equal(t, pgdata, flag(c, "--pgdata"), "%s: pg_autoctl %s creates its PGDATA", name, create)
				created = true
			}
		}
		require.True(t, created, "systemd/README.md: no pg_autoctl %s for %s", create, name)
	}
	for _, c := range commands {
		require.Contains(t, pgdatas, flag(c, "--pgdata"), "pg_autoctl %s: --pgdata of a unit", strings.Join(c, " "))
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if _, statErr := os.Stat("/usr/bin/pg_autoctl"); err != nil || statErr != nil {
		t.Log("systemd-analyze or /usr/bin/pg_autoctl missing: units not verified by systemd")
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, analyze, append([]string{"verify"}, paths...)...).CombinedOutput()
	require.NoError(t, err, "systemd-analyze verify: %s", out)
	require.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify warns")
}

// Every pg_autoctl command of systemd/README.md names a subcommand and
// flags of the installed pg_autoctl (its --help); the DATABASE_URL it
// builds from `pg_autoctl show uri` names both data nodes and asks for the
// one that takes writes, as pgx reads it.
func TestPgAutoFailoverHowTo(t *testing.T) {
	t.Parallel()
	commands := autoctlCommands(t)
	require.GreaterOrEqual(t, len(commands), 8)

	b, err := os.ReadFile("systemd/README.md")
	require.NoError(t, err)
	howto := string(b)
	var nodes []string
	for _, c := range commands {
		if strings.Join(c[:2], " ") == "create postgres" {
			nodes = append(nodes, flag(c, "--hostname"))
		}
	}
	require.Len(t, nodes, 2, "systemd/README.md creates a primary and a standby")
	urls := regexp.MustCompile("(?m)^[ \\t]*(?:DATABASE_URL=)?`?(postgres://[^` \n]+,[^` \n]+)`?").FindAllStringSubmatch(howto, -1)
	require.Len(t, urls, 2, "systemd/README.md: the URL pg_autoctl show uri prints and the DATABASE_URL made of it")
	for _, m := range urls {
		cfg, err := pgconn.ParseConfig(m[1])
		require.NoError(t, err, m[1])
		hosts := []string{cfg.Host}
		for _, f := range cfg.Fallbacks {
			hosts = append(hosts, f.Host)
		}
		require.ElementsMatch(t, nodes, hosts, "%s: every data node", m[1])
		require.Contains(t, m[1], "target_session_attrs=read-write")
		require.NotNil(t, cfg.ValidateConnect, "%s: pgx keeps the host that takes writes", m[1])
		require.Equal(t, "labels", cfg.Database)
	}

	autoctl, err := exec.LookPath("pg_autoctl")
	if err != nil {
		t.Skip("pg_autoctl is not installed: its commands are not checked")
	}
	for _, c := range commands {
		words := slices.Clone(c[:slices.IndexFunc(append(c, "--"), func(a string) bool { return strings.HasPrefix(a, "-") })])
		var help string
		for ; len(words) > 0; words = words[:len(words)-1] {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			out, err := exec.CommandContext(ctx, autoctl, append(slices.Clone(words), "--help")...).CombinedOutput()
			cancel()
			if err == nil && strings.Contains(string(out), "usage: pg_autoctl "+strings.Join(words, " ")+" ") {
				help = string(out)
				break
			}
		}
		require.NotEmpty(t, help, "pg_autoctl %s: no such command", strings.Join(c, " "))
		for _, a := range c {
			if name, ok := strings.CutPrefix(a, "--"); ok {
				name, _, _ = strings.Cut(name, "=")
				require.Regexp(t, `--`+regexp.QuoteMeta(name)+`\s`, help, "pg_autoctl %s: no flag --%s", strings.Join(words, " "), name)
			}
		}
	}
}

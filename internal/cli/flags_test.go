package cli

import (
	"bytes"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args           []string
		code           int
		ok             bool
		stdout, stderr string
	}{
		{[]string{"--n", "3"}, 0, true, "", ""},
		{[]string{"--help"}, 0, false, "usage\n", ""},
		{[]string{"--n", "x"}, 2, false, "", "tool: invalid value \"x\" for flag -n: parse error\n"},
		{[]string{"--nope"}, 2, false, "", "tool: flag provided but not defined: -nope\n"},
		{[]string{"--n", "3", "now", "later"}, 2, false, "", "tool: unexpected arguments [\"now\" \"later\"]; see tool --help\n"},
	} {
		fs := flag.NewFlagSet("tool", flag.ContinueOnError)
		n := fs.Int("n", 1, "")
		var stdout, stderr bytes.Buffer
		code, ok := Parse(fs, tc.args, "usage\n", &stdout, &stderr)
		require.Equal(t, tc.code, code, "%v", tc.args)
		require.Equal(t, tc.ok, ok, "%v", tc.args)
		require.Equal(t, tc.stdout, stdout.String(), "%v", tc.args)
		require.Equal(t, tc.stderr, stderr.String(), "%v", tc.args)
		if ok {
			require.Equal(t, 3, *n)
		}
	}
}

// ParseFlags leaves the arguments after the flags to the command.
func TestParseFlagsKeepsArguments(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("tool", flag.ContinueOnError)
	n := fs.Int("n", 1, "")
	var stdout, stderr bytes.Buffer
	code, ok := ParseFlags(fs, []string{"--n", "3", "migrate"}, "usage\n", &stdout, &stderr)
	require.True(t, ok)
	require.Equal(t, 0, code)
	require.Equal(t, 3, *n)
	require.Equal(t, []string{"migrate"}, fs.Args())
	require.Empty(t, stdout.String())
	require.Empty(t, stderr.String())
}

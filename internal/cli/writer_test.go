package cli

import (
	"bytes"
	"flag"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Usage lists every flag with its usage, and its default unless the default
// is a zero value or the usage names one.
func TestUsage(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("out", "a.tar", "the tarball")
	fs.Bool("dev", false, "a development image")
	fs.Int("n", 3, "count (default three)")
	require.Equal(t, "head\n"+
		"  --dev\n\ta development image\n"+
		"  --n\n\tcount (default three)\n"+
		"  --out\n\tthe tarball (default a.tar)\n"+
		"tail", Usage(fs, "head\n", "tail"))
}

func TestRedact(t *testing.T) {
	require.Equal(t, "postgres://u:xxxxx@h/db", Redact("postgres://u:secret@h/db"))
	require.Equal(t, "postgres://h/db", Redact("postgres://h/db"))
	require.Equal(t, "?", Redact("postgres://h:port/db"))
}

// A progress line is the time of day, two spaces and the formatted message.
func TestProgress(t *testing.T) {
	var b bytes.Buffer
	logf := Progress(&b)
	logf("phase %s: %d runs", "accept", 3)
	logf("done")
	lines := strings.Split(b.String(), "\n")
	require.Len(t, lines, 3)
	require.Empty(t, lines[2])
	for i, want := range []string{"phase accept: 3 runs", "done"} {
		clock, msg, ok := strings.Cut(lines[i], "  ")
		require.True(t, ok, lines[i])
		require.Equal(t, want, msg)
		_, err := time.Parse("15:04:05", clock)
		require.NoError(t, err, lines[i])
	}
}

// List parses every element, trimmed, and names the flag and its value when
// one does not parse.
func TestList(t *testing.T) {
	n, err := List("concurrency", "8, 32,128", strconv.Atoi)
	require.NoError(t, err)
	require.Equal(t, []int{8, 32, 128}, n)
	d, err := List("sim-latencies", "0s,50ms", time.ParseDuration)
	require.NoError(t, err)
	require.Equal(t, []time.Duration{0, 50 * time.Millisecond}, d)
	_, err = List("concurrency", "8,x", strconv.Atoi)
	require.ErrorContains(t, err, `--concurrency "8,x": strconv.Atoi: parsing "x"`)
}

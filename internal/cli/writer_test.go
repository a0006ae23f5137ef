package cli

import (
	"flag"
	"testing"

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

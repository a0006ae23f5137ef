package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
)

// A database never migrated, or one migration behind: reconcile and
// reconcile void stop at once, exit 2, one line naming `api migrate`.
func TestSchemaBehind(t *testing.T) {
	t.Parallel()
	_, empty := dbtest.NewEmpty(t)
	_, behind := dbtest.NewBehind(t, 1)
	file := writeFile(t, header)
	for _, url := range []string{empty, behind} {
		env := map[string]string{"DATABASE_URL": url, "LOG_FORMAT": "console"}
		for _, args := range [][]string{{"--invoice", file}, {"void", "--run", "1"}} {
			r := runCmd(env, args...)
			require.Equal(t, 2, r.code, "%s: %s", args, r.stderr)
			line := strings.TrimSpace(r.stderr)
			require.NotContains(t, line, "\n", "one line")
			require.Contains(t, line, "the database schema is behind this binary")
			require.Contains(t, line, "run `api migrate`")
			require.NotContains(t, line, "SQLSTATE")
		}
	}
}

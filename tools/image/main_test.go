package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Bad input stops before anything is built: exit 2 and one line naming it.
// The build itself is tested by deploy/image_test.go against the manifests.
func TestBadInput(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "image.tar")
	for _, tc := range []struct {
		args  []string
		epoch string
		want  string
	}{
		{args: []string{"--out", out, "extra"}, want: `image: unexpected argument "extra"` + "\n"},
		{args: []string{"--out", out, "--name", "Not A Name"}, want: "image: --name: "},
		{args: []string{"--out", out}, epoch: "yesterday", want: `image: SOURCE_DATE_EPOCH: "yesterday" is not a count of seconds since 1970` + "\n"},
		{args: []string{"--out", out}, epoch: "-1", want: `image: SOURCE_DATE_EPOCH: "-1" is not a count of seconds since 1970` + "\n"},
	} {
		var stdout, stderr bytes.Buffer
		getenv := func(k string) string {
			if k == "SOURCE_DATE_EPOCH" {
				return tc.epoch
			}
			return ""
		}
		code := run(t.Context(), tc.args, getenv, &stdout, &stderr)
		require.Equal(t, 2, code, "%v", tc.args)
		require.Empty(t, stdout.String())
		require.Contains(t, stderr.String(), tc.want)
		require.NoFileExists(t, out)
	}
}

func TestSourceDate(t *testing.T) {
	t.Parallel()
	d, err := sourceDate("")
	require.NoError(t, err)
	require.Equal(t, int64(0), d.Unix())
	d, err = sourceDate("1796399663")
	require.NoError(t, err)
	require.Equal(t, "2026-12-04T15:54:23Z", d.Format("2006-01-02T15:04:05Z07:00"))
}

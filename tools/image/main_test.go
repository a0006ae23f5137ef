package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
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
		{args: []string{"--out", out, "extra"}, want: `image: unexpected arguments ["extra"]`},
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
		code := run(t.Context(), append([]string{"image"}, tc.args...), getenv, &stdout, &stderr)
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

// The labels name the version and revision the binary carries (a test
// binary carries neither version nor VCS stamp: the tag, and git's HEAD),
// the --source URL and the license.
func TestOCILabels(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	require.NoError(t, err)
	tag, err := name.NewTag("registry.example.com/labelkit/labels:v9.8.7")
	require.NoError(t, err)
	labels, err := ociLabels(t.Context(), ".", self, buildSpec{tag: tag, source: "https://example.com/fork"})
	require.NoError(t, err)
	require.Equal(t, "v9.8.7", labels["org.opencontainers.image.version"])
	require.Equal(t, "https://example.com/fork", labels["org.opencontainers.image.source"])
	require.Equal(t, "Apache-2.0", labels["org.opencontainers.image.licenses"])
	if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		require.Equal(t, strings.TrimSpace(string(head)), labels["org.opencontainers.image.revision"])
	}
	require.Equal(t, defaultSource, "https://github.com/labelkit/labels")
}

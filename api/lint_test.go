package api_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// openapiTools is the directory of the pinned linter (package.json and
// package-lock.json); `go tool task redocly` installs it.
const openapiTools = "../tools/openapi"

// Redocly's linter, the version tools/openapi pins, finds nothing in the
// document under redocly.yaml (its recommended rules, each an error) beyond
// the findings .redocly.lint-ignore.yaml lists with their reasons.
func TestRedoclyLintIsClean(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the OpenAPI lint needs Node.js (22.12 or later, or 20.19 or later) and npm", tool)
		}
	}
	redocly := filepath.Join(openapiTools, "node_modules", ".bin", "redocly")
	if _, err := os.Stat(redocly); err != nil {
		// What `go tool task redocly` does: the versions of the lock file.
		out, err := exec.Command("npm", "ci", "--prefix", openapiTools, "--no-audit", "--no-fund").CombinedOutput()
		require.NoError(t, err, "installing the pinned linter (npm ci in tools/openapi):\n%s", out)
	}

	var stdout, stderr bytes.Buffer
	cmd := exec.Command(redocly, "lint", "--config", "redocly.yaml", "--format", "json", "openapi.yaml")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var res struct {
		Totals struct {
			Errors   int `json:"errors"`
			Warnings int `json:"warnings"`
			Ignored  int `json:"ignored"`
		} `json:"totals"`
		Problems []struct {
			RuleID   string `json:"ruleId"`
			Severity string `json:"severity"`
			Message  string `json:"message"`
			Location []struct {
				Pointer string `json:"pointer"`
			} `json:"location"`
		} `json:"problems"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), "redocly lint (%v) printed no report:\n%s%s", err, stdout.String(), stderr.String())
	for _, p := range res.Problems {
		where := ""
		if len(p.Location) > 0 {
			where = p.Location[0].Pointer
		}
		t.Errorf("%s %s at %s: %s", p.Severity, p.RuleID, where, p.Message)
	}
	require.Zero(t, res.Totals.Errors+res.Totals.Warnings, "redocly lint api/openapi.yaml")
	require.NoError(t, err, "redocly lint exited with an error:\n%s", stderr.String())
	require.Equal(t, 5, res.Totals.Ignored, "the findings .redocly.lint-ignore.yaml lists, and no more")
}

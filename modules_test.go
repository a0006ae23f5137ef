package labels_test

import (
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The service's go.mod lists what the service uses and nothing else: the
// tools (tools/: go-task, the demo, the benchmarks, the image builder) are a
// module of their own, and go.work joins them so that `go tool task` works
// from the repository root.

// goOutput runs the go command in dir with extra environment variables and
// returns its standard output.
func goOutput(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s (in %s, %v): %v\n%s", strings.Join(args, " "), dir, env, err, stderr)
	}
	return string(out)
}

// modFile is the part of `go mod edit -json` these tests read.
type modFile struct {
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
	Tool []struct{ Path string }
}

func readModFile(t *testing.T, dir string) modFile {
	t.Helper()
	var m modFile
	if err := json.Unmarshal([]byte(goOutput(t, dir, []string{"GOWORK=off"}, "mod", "edit", "-json")), &m); err != nil {
		t.Fatalf("%s/go.mod: %v", dir, err)
	}
	return m
}

// toolsOnly are modules only the tools use: go-task and its dependencies, the
// plots of the benchmarks, the image builder's OCI library.
var toolsOnly = []string{
	"github.com/go-task/",
	"gonum.org/",
	"github.com/google/go-containerregistry",
	"mvdan.cc/sh",
}

func TestServiceModuleListsOnlyTheService(t *testing.T) {
	t.Parallel()
	m := readModFile(t, ".")
	if len(m.Require) == 0 {
		t.Fatal("go.mod: no requirement read")
	}
	for _, tool := range m.Tool {
		t.Errorf("go.mod: tool %s: tools belong in tools/go.mod", tool.Path)
	}
	for _, r := range m.Require {
		for _, p := range toolsOnly {
			if strings.HasPrefix(r.Path, p) {
				t.Errorf("go.mod requires %s %s, which only the tools use (tools/go.mod)", r.Path, r.Version)
			}
		}
	}
	// Anything else the service does not use: go mod tidy would drop it.
	cmd := exec.Command("go", "mod", "tidy", "-diff")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("GOWORK=off go mod tidy -diff: %v (run GOWORK=off go mod tidy)\n%s", err, out)
	}
}

// moduleDirs returns the directory of every go.mod under root, relative to
// it, skipping hidden directories, testdata and the tasks' scratch space.
func moduleDirs(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	return dirs
}

func TestWorkspaceUsesEveryModule(t *testing.T) {
	t.Parallel()
	var work struct {
		Use []struct{ DiskPath string }
	}
	if err := json.Unmarshal([]byte(goOutput(t, ".", nil, "work", "edit", "-json", "go.work")), &work); err != nil {
		t.Fatalf("go.work: %v", err)
	}
	var used []string
	for _, u := range work.Use {
		used = append(used, filepath.ToSlash(filepath.Clean(u.DiskPath)))
	}
	slices.Sort(used)
	modules := moduleDirs(t, ".")
	if !slices.Contains(modules, ".") || !slices.Contains(modules, "tools") {
		t.Fatalf("modules found: %v; want at least . and tools", modules)
	}
	for _, m := range modules {
		if !slices.Contains(used, m) {
			t.Errorf("go.work does not use ./%s, a module of the tree (go work use ./%s)", m, m)
		}
	}
	for _, u := range used {
		if !slices.Contains(modules, u) {
			t.Errorf("go.work uses %s, which holds no go.mod", u)
		}
	}
	// go tool task resolves from the root through the workspace.
	if out := goOutput(t, ".", nil, "tool", "-n", "task"); strings.TrimSpace(out) == "" {
		t.Error("go tool -n task: no executable named")
	}
}

// remoteTaskfiles reports whether a module path belongs to what go-task's
// remote Taskfiles pull in from v3.40 on: a git client, then cloud SDKs.
func remoteTaskfiles(path string) bool {
	for _, p := range []string{"github.com/aws/", "cloud.google.com/", "google.golang.org/grpc", "github.com/hashicorp/", "github.com/Azure/", "github.com/go-git/"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// go-task brings no cloud SDK: neither compiled nor in its part of the
// tools' module graph.
func TestToolsBuildNoCloudSDK(t *testing.T) {
	t.Parallel()
	off := []string{"GOWORK=off"}
	// What is compiled for go-task.
	compiled := strings.Fields(goOutput(t, "tools", off, "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "tool"))
	if !slices.Contains(compiled, "github.com/go-task/task/v3") {
		t.Fatalf("go -C tools list -deps tool: go-task not among %d modules", len(compiled))
	}
	for _, m := range slices.Compact(slices.Sorted(slices.Values(compiled))) {
		if remoteTaskfiles(m) {
			t.Errorf("go-task compiles %s, of its remote Taskfiles (a cloud SDK or git client)", m)
		}
	}
	// go-task's part of the build list: every module its go.mod reaches.
	// cloud.google.com/go/compute/metadata may not appear there either.
	edges := map[string][]string{}
	start := ""
	for _, line := range strings.Split(strings.TrimSpace(goOutput(t, "tools", off, "mod", "graph")), "\n") {
		from, to, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		edges[from] = append(edges[from], to)
		if strings.HasPrefix(to, "github.com/go-task/task/v3@") && !strings.Contains(from, "@") {
			start = to
		}
	}
	if start == "" {
		t.Fatal("go -C tools mod graph: the tools' module does not require go-task")
	}
	seen := map[string]bool{start: true}
	for queue := []string{start}; len(queue) > 0; queue = queue[1:] {
		for _, next := range edges[queue[0]] {
			if !seen[next] {
				seen[next] = true
				queue = append(queue, next)
			}
		}
	}
	for _, m := range slices.Sorted(maps.Keys(seen)) {
		if path, _, _ := strings.Cut(m, "@"); remoteTaskfiles(path) {
			t.Errorf("go-task's go.mod reaches %s, of its remote Taskfiles (a cloud SDK or git client)", m)
		}
	}
}

// The workspace changes no version the service is compiled with: the image
// (tools/image) builds with GOWORK=off, tests and tasks in the workspace.
// Modules of this tree (the service, the SDK replaced by ./client) have no
// version and are left out.
func TestWorkspaceKeepsServiceVersions(t *testing.T) {
	t.Parallel()
	args := []string{"list", "-deps", "-test", "-f", "{{with .Module}}{{if not (or .Main .Replace)}}{{.Path}} {{.Version}}{{end}}{{end}}", "./..."}
	versions := func(env []string) []string {
		return slices.Compact(slices.Sorted(slices.Values(strings.Fields(strings.ReplaceAll(goOutput(t, ".", env, args...), " ", "@")))))
	}
	inWork, alone := versions(nil), versions([]string{"GOWORK=off"})
	if len(alone) < 5 {
		t.Fatalf("GOWORK=off go list -deps: %d modules", len(alone))
	}
	if !slices.Equal(inWork, alone) {
		for _, m := range alone {
			if !slices.Contains(inWork, m) {
				t.Errorf("%s alone, another version in the workspace", m)
			}
		}
		for _, m := range inWork {
			if !slices.Contains(alone, m) {
				t.Errorf("%s in the workspace, another version alone (raise it in go.mod)", m)
			}
		}
	}
}

// goTaskKeysFrom is the go-task release whose taskfile/ast the key lists
// below come from; tools/go.mod pins it.
const goTaskKeysFrom = "v3.39.2"

// The keys go-task v3.39.2 reads in a task and in a command (taskfile/ast,
// task.go and cmd.go; v3.45 reads the same). It ignores any other key without a word, so a key of
// a later release (if:, a command's condition) would silently run always.
var (
	goTaskTaskKeys = []string{"cmds", "cmd", "deps", "label", "desc", "prompt", "summary", "aliases", "sources", "generates", "status", "preconditions", "dir", "set", "shopt", "vars", "env", "dotenv", "silent", "interactive", "internal", "method", "prefix", "ignore_error", "run", "platforms", "requires", "watch"}
	goTaskCmdKeys  = []string{"cmd", "task", "for", "silent", "set", "shopt", "vars", "ignore_error", "defer", "platforms"}
)

func TestTaskfileKeysKnownToPinnedGoTask(t *testing.T) {
	t.Parallel()
	pinned := ""
	for _, r := range readModFile(t, "tools").Require {
		if r.Path == "github.com/go-task/task/v3" {
			pinned = r.Version
		}
	}
	if pinned != goTaskKeysFrom {
		t.Fatalf("tools/go.mod pins go-task %q; the key lists here are %s's: check them against its taskfile/ast and update goTaskKeysFrom", pinned, goTaskKeysFrom)
	}
	b, err := os.ReadFile("Taskfile.yml")
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tasks map[string]map[string]any `yaml:"tasks"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	if len(tf.Tasks) == 0 {
		t.Fatal("Taskfile.yml: no tasks read")
	}
	for name, task := range tf.Tasks {
		for key := range task {
			if !slices.Contains(goTaskTaskKeys, key) {
				t.Errorf("task %s: key %q, unknown to go-task %s (ignored)", name, key, pinned)
			}
		}
		cmds, _ := task["cmds"].([]any)
		for i, c := range cmds {
			m, ok := c.(map[string]any)
			if !ok {
				continue
			}
			for key := range m {
				if !slices.Contains(goTaskCmdKeys, key) {
					t.Errorf("task %s, command %d: key %q, unknown to go-task %s (ignored)", name, i+1, key, pinned)
				}
			}
		}
	}
}

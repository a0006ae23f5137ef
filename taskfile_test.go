package labels_test

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// `go tool task --list` shows one line per task: every description is one
// short line, and what more there is to say is a comment in Taskfile.yml.
func TestTaskDescriptionsAreOneLine(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("Taskfile.yml")
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tasks map[string]struct {
			Desc string `yaml:"desc"`
		} `yaml:"tasks"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	if len(tf.Tasks) == 0 {
		t.Fatal("Taskfile.yml: no tasks read")
	}
	const most = 80
	for name, task := range tf.Tasks {
		if strings.Contains(task.Desc, "\n") || len(task.Desc) > most {
			t.Errorf("task %s: description of %d characters (at most %d, one line): %q", name, len(task.Desc), most, task.Desc)
		}
	}
}

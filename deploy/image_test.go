package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// dockerfile is what the image holds, read from the Dockerfile: the final
// stage's base and user, and the binaries copied into it.
type dockerfile struct {
	base     string   // the final FROM, build arguments resolved
	user     string   // the final stage's USER
	binaries []string // the commands the build stage builds into /usr/local/bin
	finalRun bool     // a RUN in the final stage (which has no shell to run it)
	cgoOff   bool
}

func readDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	args := map[string]string{}
	var d dockerfile
	var stages int
	var builtTo, copiedFrom string
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "ARG":
			if k, v, ok := strings.Cut(f[1], "="); ok {
				args[k] = v
			}
		case "FROM":
			stages++
			d.base = os.Expand(f[1], func(k string) string { return args[k] })
			d.user, d.finalRun = "", false
		case "USER":
			d.user = f[1]
		case "RUN":
			d.finalRun = true
			if slices.Contains(f, "CGO_ENABLED=0") && slices.Contains(f, "build") {
				d.cgoOff = true
				for i, a := range f {
					if a == "-o" && i+1 < len(f) {
						builtTo = f[i+1]
					}
					if pkg, ok := strings.CutPrefix(a, "./cmd/"); ok {
						d.binaries = append(d.binaries, pkg)
					}
				}
			}
		case "COPY":
			if len(f) == 4 && strings.HasPrefix(f[1], "--from=") && f[3] == "/usr/local/bin/" {
				copiedFrom = f[2]
			}
		}
	}
	require.GreaterOrEqual(t, stages, 2, "a multi-stage build")
	require.NotEmpty(t, builtTo, "the build stage names its output directory")
	require.Equal(t, builtTo, copiedFrom, "the final stage copies what the build stage built into /usr/local/bin")
	return d
}

// The image the manifests run is the Dockerfile's: a distroless static base
// run as its nonroot user, holding a static binary of every command (each
// cmd/ directory), and nothing that needs a shell.
func TestImage(t *testing.T) {
	t.Parallel()
	d := readDockerfile(t, "../Dockerfile")
	require.Regexp(t, `^gcr\.io/distroless/static(-debian\d+)?:nonroot(@sha256:[0-9a-f]{64})?$`, d.base, "a distroless static nonroot base")
	require.Equal(t, "65532:65532", d.user, "distroless' nonroot user")
	require.False(t, d.finalRun, "the final stage cannot RUN: the base has no shell")
	require.True(t, d.cgoOff, "static binaries for a base without libc")

	dirs, err := filepath.Glob("../cmd/*/main.go")
	require.NoError(t, err)
	var commands []string
	for _, m := range dirs {
		commands = append(commands, filepath.Base(filepath.Dir(m)))
	}
	slices.Sort(commands)
	require.Equal(t, commands, slices.Sorted(slices.Values(d.binaries)), "the image holds every binary of cmd/")
	uid, err := strconv.Atoi(strings.Split(d.user, ":")[0])
	require.NoError(t, err)

	// Every workload runs a binary of the image, as its user, without a shell.
	image := ""
	for _, o := range readManifests(t, "kubernetes") {
		w := decodeWorkload(t, o)
		if w == nil || o.Metadata.Labels["app.kubernetes.io/component"] == "pgbouncer" {
			continue // PgBouncer runs its own image
		}
		for _, c := range append(w.pod.Spec.Containers, w.pod.Spec.InitContainers...) {
			argv := invocation(c)
			require.NotEmpty(t, argv, o.id())
			require.Contains(t, d.binaries, filepath.Base(argv[0]), "%s runs %q, which the image does not hold", o.id(), argv[0])
			require.True(t, argv[0] == filepath.Base(argv[0]) || argv[0] == "/usr/local/bin/"+filepath.Base(argv[0]),
				"%s: %q is not where the image has it", o.id(), argv[0])
			requireNoShell(t, o.id(), argv)
			image = c.Image
		}
		var sc struct {
			RunAsNonRoot bool `yaml:"runAsNonRoot"`
			RunAsUser    *int `yaml:"runAsUser"`
		}
		require.NoError(t, podSecurityContext(o).Decode(&sc), o.id())
		require.True(t, sc.RunAsNonRoot, o.id())
		require.NotNil(t, sc.RunAsUser, o.id())
		require.Equal(t, uid, *sc.RunAsUser, "%s: runAsUser is the image's user", o.id())
	}

	// The systemd units run the same binaries, installed in /usr/local/bin, without a shell.
	units, err := filepath.Glob("systemd/*.service")
	require.NoError(t, err)
	for _, path := range units {
		for _, line := range readUnit(t, path)["Service"]["ExecStart"] {
			argv := execArgv(line)
			require.Contains(t, d.binaries, filepath.Base(argv[0]), path)
			requireNoShell(t, path, argv)
		}
	}

	// `go tool task image` names the image the manifests run.
	tf, err := os.ReadFile("../Taskfile.yml")
	require.NoError(t, err)
	m := regexp.MustCompile(`IMAGE: '\{\{\.IMAGE \| default "([^"]+)"\}\}'`).FindSubmatch(tf)
	require.NotNil(t, m, "Taskfile.yml: the image task's default IMAGE")
	require.Equal(t, image, string(m[1]), "go tool task image builds the image the manifests run")
}

// requireNoShell fails when argv runs a shell or asks for one's expansions.
func requireNoShell(t *testing.T, where string, argv []string) {
	t.Helper()
	require.NotContains(t, []string{"sh", "bash", "dash", "ash", "env"}, filepath.Base(argv[0]), "%s: the image has no shell", where)
	for _, a := range argv {
		require.False(t, strings.ContainsAny(a, "$`|;&<>"), "%s: %q needs a shell to mean anything", where, a)
	}
}

// podSecurityContext returns the pod template's securityContext of a workload.
func podSecurityContext(o *k8sObject) *yaml.Node {
	var spec struct {
		Template struct {
			Spec struct {
				SecurityContext yaml.Node `yaml:"securityContext"`
			} `yaml:"spec"`
		} `yaml:"template"`
		JobTemplate struct {
			Spec struct {
				Template struct {
					Spec struct {
						SecurityContext yaml.Node `yaml:"securityContext"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		} `yaml:"jobTemplate"`
	}
	_ = o.Spec.Decode(&spec)
	if o.Kind == "CronJob" {
		return &spec.JobTemplate.Spec.Template.Spec.SecurityContext
	}
	return &spec.Template.Spec.SecurityContext
}

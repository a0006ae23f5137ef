package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// sourceDateEpoch is the commit time the test builds with (any fixed value).
const sourceDateEpoch = 1796399663

// builtImage is the image as tools/image wrote it, read back from its tarball.
type builtImage struct {
	digest string // what tools/image printed
	tags   []string
	config imageConfig
	layers int
	files  map[string]*imageFile // by absolute path, directories without trailing /
	order  []string              // entry names as stored
}

// imageConfig is what the test reads of the image's configuration.
type imageConfig struct {
	OS           string    `json:"os"`
	Architecture string    `json:"architecture"`
	Created      time.Time `json:"created"`
	Config       struct {
		User       string
		Env        []string
		WorkingDir string
		Entrypoint []string
		Labels     map[string]string
		Cmd        []string
	} `json:"config"`
}

type imageFile struct {
	hdr  *tar.Header
	body []byte
}

// descriptor and manifest are Docker's image manifest (schema 2), whose
// SHA-256 is the image's digest: the configuration and each compressed
// layer by size and digest.
type descriptor struct {
	MediaType string `json:"mediaType"`
	Size      int    `json:"size"`
	Digest    string `json:"digest"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

func digestOf(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }

// buildImage runs `go -C tools run ./image` from the module root, as
// `go tool task image` does, into dir and reads the result back: docker
// save's format, a manifest.json naming the configuration and the gzipped
// layers.
func buildImage(t *testing.T, dir, file string) builtImage {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 9*time.Minute)
	defer cancel()
	out := filepath.Join(dir, file)
	cmd := exec.CommandContext(ctx, "go", "-C", "tools", "run", "./image", "--out", out)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.Itoa(sourceDateEpoch))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	require.NoError(t, err, "go -C tools run ./image: %s", stderr.String())

	b := builtImage{digest: strings.TrimSpace(string(stdout)), files: map[string]*imageFile{}}
	blobs := map[string][]byte{}
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	for tr := tar.NewReader(f); ; {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		blobs[h.Name], err = io.ReadAll(tr)
		require.NoError(t, err)
	}
	var saved []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	require.NoError(t, json.Unmarshal(blobs["manifest.json"], &saved))
	require.Len(t, saved, 1, "one image in the tarball")
	img := saved[0]
	b.tags = img.RepoTags
	require.Len(t, b.tags, 1)
	config := blobs[img.Config]
	require.Equal(t, img.Config, digestOf(config), "the configuration is stored under its digest")
	require.NoError(t, json.Unmarshal(config, &b.config))
	m := manifest{SchemaVersion: 2, MediaType: "application/vnd.docker.distribution.manifest.v2+json",
		Config: descriptor{"application/vnd.docker.container.image.v1+json", len(config), img.Config}}
	b.layers = len(img.Layers)
	for _, name := range img.Layers {
		gz := blobs[name]
		m.Layers = append(m.Layers, descriptor{"application/vnd.docker.image.rootfs.diff.tar.gzip", len(gz), digestOf(gz)})
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		require.NoError(t, err)
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			body, err := io.ReadAll(tr)
			require.NoError(t, err)
			b.order = append(b.order, h.Name)
			b.files["/"+strings.TrimSuffix(h.Name, "/")] = &imageFile{hdr: h, body: body}
		}
	}
	js, err := json.Marshal(m)
	require.NoError(t, err)
	require.Equal(t, digestOf(js), b.digest, "tools/image prints the digest of the image it wrote")
	return b
}

// The image the manifests run is the one tools/image builds: a static binary
// of every command (each cmd/ directory) in /usr/local/bin, run as nonroot,
// with nothing that needs a shell, built byte for byte the same twice.
func TestImage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the image (three binaries): not under -short")
	}
	dir := t.TempDir()
	img := buildImage(t, dir, "a.tar")
	again := buildImage(t, dir, "b.tar")
	require.Equal(t, img.digest, again.digest, "the same commit builds the same image")
	a, err := os.ReadFile(filepath.Join(dir, "a.tar"))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "b.tar"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(a, b), "the same commit writes the same tarball")

	// The configuration: nonroot, PATH to the binaries, no entrypoint.
	created := time.Unix(sourceDateEpoch, 0).UTC()
	cf := img.config
	require.Equal(t, "linux", cf.OS)
	require.Equal(t, "amd64", cf.Architecture)
	require.True(t, created.Equal(cf.Created), "created at SOURCE_DATE_EPOCH, not %s", cf.Created)
	require.Equal(t, "65532:65532", cf.Config.User)
	require.Equal(t, []string{"PATH=/usr/local/bin"}, cf.Config.Env)
	require.Equal(t, "/home/nonroot", cf.Config.WorkingDir)
	require.Empty(t, cf.Config.Entrypoint, "every manifest names its command")
	require.Empty(t, cf.Config.Cmd)
	// The OCI labels: the version and revision the binaries were built from
	// (the version: the tag tools/image names the image with when the
	// binaries carry none, as in a git worktree), where the source is and its
	// license.
	head, err := exec.CommandContext(t.Context(), "git", "rev-parse", "HEAD").Output()
	require.NoError(t, err, "git rev-parse HEAD")
	apiInfo, err := buildinfo.Read(bytes.NewReader(img.files["/usr/local/bin/api"].body))
	require.NoError(t, err, "the build information of api")
	for _, s := range apiInfo.Settings {
		if s.Key == "vcs.revision" {
			require.Equal(t, strings.TrimSpace(string(head)), s.Value, "api's VCS stamp, where the go command made one")
		}
	}
	version := apiInfo.Main.Version
	if version == "" || version == "(devel)" {
		version = "v1.0.0"
	}
	require.Equal(t, map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": strings.TrimSpace(string(head)),
		"org.opencontainers.image.source":   "https://github.com/labelkit/labels",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}, cf.Config.Labels)
	require.Equal(t, 1, img.layers)

	// The layer: sorted, fixed times and owners, the few files a static Go
	// binary expects, and no shell.
	require.True(t, slices.IsSorted(img.order), "entries sorted: %v", img.order)
	for p, f := range img.files {
		require.True(t, created.Equal(f.hdr.ModTime), "%s: mtime %s", p, f.hdr.ModTime)
		owner := 0
		if p == "/home/nonroot" {
			owner = 65532
		}
		require.Equal(t, owner, f.hdr.Uid, p)
		require.Equal(t, owner, f.hdr.Gid, p)
		require.NotContains(t, []string{"sh", "bash", "dash", "ash", "busybox", "env"}, filepath.Base(p), "%s: the image has no shell", p)
		require.False(t, strings.HasPrefix(p, "/bin") || strings.HasPrefix(p, "/usr/bin"), "%s: nothing outside /usr/local/bin runs", p)
	}
	requireDir(t, img, "/tmp", 0o1777)
	requireDir(t, img, "/home/nonroot", 0o700)
	requireIDLine(t, img, "/etc/passwd", "nonroot:x:65532:65532:nonroot:/home/nonroot:")
	requireIDLine(t, img, "/etc/passwd", "root:x:0:0:")
	requireIDLine(t, img, "/etc/group", "nonroot:x:65532:")
	requireIDLine(t, img, "/etc/group", "root:x:0:")

	// /usr/local/bin holds one static binary of every command but the
	// carrier simulator, which stays out of the production image.
	dirs, err := filepath.Glob("../cmd/*/main.go")
	require.NoError(t, err)
	var commands, binaries []string
	for _, m := range dirs {
		if c := filepath.Base(filepath.Dir(m)); c != "carrier" {
			commands = append(commands, c)
		}
	}
	for p := range img.files {
		if d, f := filepath.Split(p); d == "/usr/local/bin/" && f != "" {
			binaries = append(binaries, f)
		}
	}
	slices.Sort(commands)
	slices.Sort(binaries)
	require.Equal(t, commands, binaries, "the image holds every binary of cmd/ but the simulator, and nothing else in /usr/local/bin")
	require.NotContains(t, img.files, "/usr/local/bin/carrier", "the simulator is not in the production image")
	for _, c := range binaries {
		requireStaticBinary(t, img, "/usr/local/bin/"+c)
	}

	// Every workload runs a binary of the image, as its user, without a shell.
	uid, err := strconv.Atoi(strings.Split(cf.Config.User, ":")[0])
	require.NoError(t, err)
	manifestImage := ""
	for _, w := range imageWorkloads(t) {
		o := w.obj
		for _, c := range w.containers() {
			argv := invocation(c)
			requireInImage(t, img, o.id(), argv[0])
			requireNoShell(t, o.id(), argv)
			if manifestImage == "" {
				manifestImage = c.Image
			}
			require.Equal(t, manifestImage, c.Image, "%s: every workload runs the one image", o.id())
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
	for _, path := range labelsUnits(t) {
		for _, line := range readUnit(t, path)["Service"]["ExecStart"] {
			argv := execArgv(line)
			requireInImage(t, img, path, argv[0])
			requireNoShell(t, path, argv)
		}
	}

	// `go tool task image` and tools/image's default name the image the manifests run.
	tf, err := os.ReadFile("../Taskfile.yml")
	require.NoError(t, err)
	m := regexp.MustCompile(`IMAGE: '\{\{\.IMAGE \| default "([^"]+)"\}\}'`).FindSubmatch(tf)
	require.NotNil(t, m, "Taskfile.yml: the image task's default IMAGE")
	require.Equal(t, manifestImage, string(m[1]), "go tool task image builds the image the manifests run")
	require.Equal(t, []string{manifestImage}, img.tags, "tools/image names the image the manifests run by default")

	// A binary from the layer runs (on a machine that can run linux/amd64).
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Logf("not running api on %s/%s", runtime.GOOS, runtime.GOARCH)
		return
	}
	api := filepath.Join(dir, "api")
	require.NoError(t, os.WriteFile(api, img.files["/usr/local/bin/api"].body, 0o755))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, api, "--help")
	cmd.Env = []string{"PATH=/usr/local/bin"}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "api --help from the image: %s", out)
	require.Contains(t, string(out), "api migrate")
	cmd = exec.CommandContext(ctx, api, "--version")
	cmd.Env = []string{"PATH=/usr/local/bin"}
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "api --version from the image: %s", out)
	require.True(t, strings.HasPrefix(string(out), "api "), "api --version: %s", out)
}

// Without building the image (-short too): every command the manifests and
// units run is one of cmd/ and needs no shell, and every pod runs as non-root.
// TestImage checks the same commands and user against the built image.
func TestCommandsNeedNoShell(t *testing.T) {
	t.Parallel()
	dirs, err := filepath.Glob("../cmd/*/main.go")
	require.NoError(t, err)
	var commands []string
	for _, m := range dirs {
		commands = append(commands, filepath.Base(filepath.Dir(m)))
	}
	for _, w := range imageWorkloads(t) {
		o := w.obj
		for _, c := range w.containers() {
			argv := invocation(c)
			require.Contains(t, commands, filepath.Base(argv[0]), "%s runs %q, not a command of cmd/", o.id(), argv[0])
			requireNoShell(t, o.id(), argv)
		}
		var sc struct {
			RunAsNonRoot bool `yaml:"runAsNonRoot"`
		}
		require.NoError(t, podSecurityContext(o).Decode(&sc), o.id())
		require.True(t, sc.RunAsNonRoot, o.id())
	}
	for _, path := range labelsUnits(t) {
		for _, line := range readUnit(t, path)["Service"]["ExecStart"] {
			argv := execArgv(line)
			require.Contains(t, commands, filepath.Base(argv[0]), path)
			requireNoShell(t, path, argv)
		}
	}
}

// imageWorkloads returns the workloads that run the project's image: all but
// PgBouncer's, which runs its own. Each of their containers names a command.
func imageWorkloads(t *testing.T) []*workload {
	t.Helper()
	var ws []*workload
	for _, o := range readManifests(t, "kubernetes") {
		w := decodeWorkload(t, o)
		if w == nil || o.Metadata.Labels["app.kubernetes.io/component"] == "pgbouncer" {
			continue
		}
		for _, c := range w.containers() {
			require.NotEmpty(t, invocation(c), o.id())
		}
		ws = append(ws, w)
	}
	return ws
}

func requireDir(t *testing.T, img builtImage, path string, perm int64) {
	t.Helper()
	f := img.files[path]
	require.NotNil(t, f, "the image has %s", path)
	require.Equal(t, byte(tar.TypeDir), f.hdr.Typeflag, path)
	require.Equal(t, perm, f.hdr.Mode, "%s: mode %o", path, f.hdr.Mode)
}

func requireIDLine(t *testing.T, img builtImage, path, prefix string) {
	t.Helper()
	f := img.files[path]
	require.NotNil(t, f, "the image has %s", path)
	require.Equal(t, int64(0o644), f.hdr.Mode, path)
	for line := range strings.SplitSeq(string(f.body), "\n") {
		if strings.HasPrefix(line, prefix) {
			return
		}
	}
	require.Failf(t, "missing entry", "%s has no line %q…:\n%s", path, prefix, f.body)
}

// requireStaticBinary checks path is an executable linux/amd64 ELF without an
// interpreter (nothing to load it from in the image), built without cgo and
// carrying the fallback CA roots (the image has no CA bundle).
func requireStaticBinary(t *testing.T, img builtImage, path string) {
	t.Helper()
	f := img.files[path]
	require.NotNil(t, f, path)
	require.Equal(t, byte(tar.TypeReg), f.hdr.Typeflag, path)
	require.Equal(t, int64(0o755), f.hdr.Mode, "%s: mode %o", path, f.hdr.Mode)
	e, err := elf.NewFile(bytes.NewReader(f.body))
	require.NoError(t, err, "%s is an ELF binary", path)
	require.Equal(t, elf.EM_X86_64, e.Machine, path)
	require.Equal(t, elf.ET_EXEC, e.Type, "%s: a static executable", path)
	for _, p := range e.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "%s asks for an interpreter (dynamic loader)", path)
		require.NotEqual(t, elf.PT_DYNAMIC, p.Type, "%s is dynamically linked", path)
	}
	bi, err := buildinfo.Read(bytes.NewReader(f.body))
	require.NoError(t, err, path)
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	require.Equal(t, "0", settings["CGO_ENABLED"], path)
	require.Equal(t, "true", settings["-trimpath"], path)
	require.True(t, slices.ContainsFunc(bi.Deps, func(m *debug.Module) bool {
		return m.Path == "golang.org/x/crypto/x509roots/fallback"
	}), "%s embeds the fallback CA roots", path)
}

// requireInImage checks a command a manifest or unit runs is an executable
// of the image: by name through the image's PATH, or by its full path.
func requireInImage(t *testing.T, img builtImage, where, command string) {
	t.Helper()
	path := command
	if !strings.Contains(command, "/") {
		path = "/usr/local/bin/" + command // the image's PATH
	}
	f := img.files[path]
	require.NotNil(t, f, "%s runs %q, which the image does not hold", where, command)
	require.Equal(t, byte(tar.TypeReg), f.hdr.Typeflag, where)
	require.NotZero(t, f.hdr.Mode&0o001, "%s: %q is not executable by the image's user", where, command)
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

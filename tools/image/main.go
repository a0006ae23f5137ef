// Command image builds the service's container image without Docker and
// without pulling a base image, as ko does: it compiles the service's
// commands (api, worker, reconcile; with --dev also the carrier simulator) as
// static binaries and writes them, with the few files a static Go binary
// expects of distroless static nonroot, as one layer on an empty base.
//
//	go -C tools run ./image --out labels-image.tar [--name registry.example.com/labelkit/labels:v1.0.0] [--arch amd64] [--source URL] [--dev]
//
// The tarball is `docker save`'s format (docker load -i, podman load -i,
// crane push, skopeo copy docker-archive:…), tagged with --name; the image
// digest is printed on stdout. The image:
//
//	/usr/local/bin/{api,worker,reconcile}          0755, CGO_ENABLED=0, -trimpath, no build id, the VCS stamp
//	                                                when the checkout has one (carrier too with --dev)
//	/etc/passwd, /etc/group                         root (0) and nonroot (65532, home /home/nonroot)
//	/home/nonroot                                   0700, owned by nonroot; /root 0700
//	/tmp                                            1777
//	config                                          User 65532:65532, Env PATH=/usr/local/bin,
//	                                                WorkingDir /home/nonroot, no Entrypoint or Cmd,
//	                                                Labels org.opencontainers.image.version (the module's
//	                                                version the binaries carry, else --name's tag),
//	                                                .revision (their VCS revision, else git rev-parse HEAD;
//	                                                absent when neither is known), .source (--source,
//	                                                default https://github.com/labelkit/labels) and
//	                                                .licenses (Apache-2.0)
//
// The production image leaves the carrier simulator out: --dev adds it (a
// development image, for a test cluster with no real carrier).
//
// There is no shell and no CA bundle: each command embeds the Mozilla roots
// (golang.org/x/crypto/x509roots/fallback, used only where the system has
// none), so the worker reaches the carrier and webhooks over https.
//
// Reproducible: the image's created time and every file time are
// SOURCE_DATE_EPOCH (the Taskfile passes the last commit's time; unset means
// 1970-01-01), entries are sorted with fixed owners, so the same commit and
// Go toolchain build the same digest. On error it prints one line to stderr
// and exits 1 (2 for a bad flag).
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/buildinfo"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/internal/proc"
)

// commands are the cmd/ directories built into /usr/local/bin; devCommands
// are added with --dev.
var (
	commands    = []string{"api", "worker", "reconcile"}
	devCommands = []string{"carrier"}
)

const (
	defaultName   = "registry.example.com/labelkit/labels:v1.0.0"
	defaultSource = "https://github.com/labelkit/labels"
	license       = "Apache-2.0"
	nonroot       = 65532
	home          = "/home/nonroot"
	binDir        = "/usr/local/bin"
)

func main() { cli.Exit(run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	out := fs.String("out", "labels-image.tar", "the tarball to write")
	ref := fs.String("name", defaultName, "the image's name (repository:tag) in the tarball")
	arch := fs.String("arch", "amd64", "GOARCH of the binaries and the image (linux)")
	source := fs.String("source", defaultSource, "the source repository's URL (label org.opencontainers.image.source)")
	dev := fs.Bool("dev", false, "add the carrier simulator (a development image)")
	if code, ok := cli.Parse(fs, args[1:], cli.Usage(fs, "Usage: image [flags]\n\nFlags:\n", ""), stdout, stderr); !ok {
		return code
	}
	tag, err := name.NewTag(*ref)
	if err != nil {
		fmt.Fprintf(stderr, "image: --name: %v\n", err)
		return 2
	}
	created, err := sourceDate(getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		fmt.Fprintf(stderr, "image: SOURCE_DATE_EPOCH: %v\n", err)
		return 2
	}
	cmds := commands
	if *dev {
		cmds = append(slices.Clone(commands), devCommands...)
	}
	digest, err := build(ctx, buildSpec{tag: tag, out: *out, arch: *arch, source: *source, commands: cmds, created: created})
	if err != nil {
		fmt.Fprintf(stderr, "image: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, digest)
	return 0
}

// sourceDate reads SOURCE_DATE_EPOCH (seconds since 1970); empty is 1970.
func sourceDate(s string) (time.Time, error) {
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("%q is not a count of seconds since 1970", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// buildSpec is what one build makes.
type buildSpec struct {
	tag               name.Tag
	out, arch, source string
	commands          []string
	created           time.Time
}

func build(ctx context.Context, spec buildSpec) (v1.Hash, error) {
	root, err := proc.ModuleRoot()
	if err != nil {
		return v1.Hash{}, err
	}
	bins, err := compile(ctx, root, spec.arch, spec.commands)
	if err != nil {
		return v1.Hash{}, err
	}
	defer bins.Remove()
	layerTar, err := rootfs(bins.Dir, spec.commands, spec.created)
	if err != nil {
		return v1.Hash{}, err
	}
	labels, err := ociLabels(ctx, root, bins.Path(spec.commands[0]), spec)
	if err != nil {
		return v1.Hash{}, err
	}
	img, err := assemble(layerTar, spec, labels)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := tarball.WriteToFile(spec.out, spec.tag, img); err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", spec.out, err)
	}
	return img.Digest()
}

// compile builds the commands into a temporary directory: static (no libc
// in the image), and without paths or build ids that would change the bytes
// from one checkout or machine to another. The VCS stamp (revision, commit
// time, a modified tree) is the same for the same commit, and makes
// `--version` and `go version -m` name it; a checkout the go command cannot
// read it from builds without. GOWORK=off: the service's go.mod alone
// chooses what goes in, not the workspace (go.work) that also holds the tools.
func compile(ctx context.Context, root, arch string, commands []string) (*proc.Binaries, error) {
	var pkgs []string
	for _, c := range commands {
		pkgs = append(pkgs, "./cmd/"+c)
	}
	return proc.Build(ctx, &proc.BuildOpts{ModuleDir: root, Packages: pkgs,
		Flags: []string{"-trimpath", "-buildvcs=auto", "-ldflags=-s -w -buildid="},
		Env:   []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch, "GOFLAGS=", "GOWORK=off"}})
}

// entry is one file or directory of the layer.
type entry struct {
	path     string // without the leading slash; directories end in /
	mode     int64
	uid, gid int
	body     []byte
}

const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"nonroot:x:65532:\n"
)

// rootfs writes the layer's tar: what distroless static nonroot gives a
// static Go binary, and the binaries. Owners are root except nonroot's home,
// which it must be able to write, as in distroless.
func rootfs(bin string, commands []string, mtime time.Time) ([]byte, error) {
	entries := []entry{
		{path: "etc/", mode: 0o755},
		{path: "etc/group", mode: 0o644, body: []byte(group)},
		{path: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{path: "home/", mode: 0o755},
		{path: "home/nonroot/", mode: 0o700, uid: nonroot, gid: nonroot},
		{path: "root/", mode: 0o700},
		{path: "tmp/", mode: 0o1777},
		{path: "usr/", mode: 0o755},
		{path: "usr/local/", mode: 0o755},
		{path: "usr/local/bin/", mode: 0o755},
	}
	for _, c := range commands {
		b, err := os.ReadFile(filepath.Join(bin, c))
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{path: "usr/local/bin/" + c, mode: 0o755, body: b})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.path, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: mtime, Format: tar.FormatPAX,
			Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		if strings.HasSuffix(e.path, "/") {
			h.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// assemble puts the layer on an empty base with the runtime configuration.
// No Entrypoint or Cmd: every manifest and unit names its command.
func assemble(layerTar []byte, spec buildSpec, labels map[string]string) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: spec.created},
			CreatedBy: "go -C tools run ./image",
			Comment:   strings.Join(spec.commands, ", ") + " in " + binDir + "; /etc/passwd, /etc/group, " + home + ", /tmp",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", spec.arch
	cf.Created = v1.Time{Time: spec.created}
	cf.Config = v1.Config{
		User:       strconv.Itoa(nonroot) + ":" + strconv.Itoa(nonroot),
		Env:        []string{"PATH=" + binDir},
		WorkingDir: home,
		Labels:     labels,
	}
	return mutate.ConfigFile(img, cf)
}

// ociLabels are the image's org.opencontainers.image labels: the version and
// revision the binary at bin was built from (its build information; the
// revision from git when the go command stamped none, as in a git worktree),
// the source repository and the license.
func ociLabels(ctx context.Context, root, bin string, spec buildSpec) (map[string]string, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("read the build information of %s: %w", filepath.Base(bin), err)
	}
	version := info.Main.Version
	if version == "" || version == "(devel)" {
		version = spec.tag.TagStr()
	}
	revision := ""
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			revision = s.Value
		}
	}
	if revision == "" {
		cmd := exec.CommandContext(ctx, "git", "rev-parse", "HEAD")
		cmd.Dir = root
		if out, err := cmd.Output(); err == nil {
			revision = strings.TrimSpace(string(out))
		}
	}
	labels := map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.source":   spec.source,
		"org.opencontainers.image.licenses": license,
	}
	if revision != "" {
		labels["org.opencontainers.image.revision"] = revision
	}
	return labels, nil
}

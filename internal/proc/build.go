package proc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/labelkit/labels/internal/devdb"
)

// BuildOpts tunes [Build].
type BuildOpts struct {
	// ModuleDir is where the go command runs, so where the package patterns
	// are resolved; empty means the main module's root ([ModuleRoot]).
	ModuleDir string
	// OutDir receives the binaries; empty means a new temporary directory,
	// which [Binaries.Remove] deletes.
	OutDir string
	// Packages to build; empty means ./cmd/... (every binary of the project).
	Packages []string
	// Race builds the binaries with the race detector.
	Race bool
	// Flags are passed to go build before the packages (e.g. -cover).
	Flags []string
	// Env is added to this process's environment for go build (GOOS=linux,
	// CGO_ENABLED=0...).
	Env []string
}

// Binaries is a directory of built executables.
type Binaries struct {
	// Dir holds one executable per main package, named after its directory.
	Dir  string
	temp bool
}

// Build compiles the main packages of o (./cmd/... by default) into one
// directory with a single go build, so shared dependencies compile once.
func Build(ctx context.Context, o *BuildOpts) (*Binaries, error) {
	if o == nil {
		o = &BuildOpts{}
	}
	modDir := o.ModuleDir
	if modDir == "" {
		var err error
		if modDir, err = ModuleRoot(); err != nil {
			return nil, err
		}
	}
	b := &Binaries{Dir: o.OutDir}
	if b.Dir == "" {
		dir, err := os.MkdirTemp("", "labels-bin-")
		if err != nil {
			return nil, err
		}
		b.Dir, b.temp = dir, true
	} else if err := os.MkdirAll(b.Dir, 0o755); err != nil {
		return nil, err
	}
	pkgs := o.Packages
	if len(pkgs) == 0 {
		pkgs = []string{"./cmd/..."}
	}
	// The trailing separator makes go build write every main package's
	// executable into the directory, also when there is only one.
	args := []string{"build", "-o", b.Dir + string(filepath.Separator)}
	if o.Race {
		args = append(args, "-race")
	}
	args = append(args, o.Flags...)
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, goCommand(), args...)
	cmd.Dir = modDir
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		_ = b.Remove()
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return b, nil
}

// Path returns the path of the executable built from the package in a
// directory called name (api for ./cmd/api). It does not check that it exists;
// see [Binaries.Has].
func (b *Binaries) Path(name string) string {
	return filepath.Join(b.Dir, name)
}

// Has reports whether an executable called name was built.
func (b *Binaries) Has(name string) bool {
	fi, err := os.Stat(b.Path(name))
	return err == nil && fi.Mode().IsRegular()
}

// Remove deletes the directory when [Build] created it, and does nothing for a
// directory the caller named.
func (b *Binaries) Remove() error {
	if b == nil || !b.temp {
		return nil
	}
	return os.RemoveAll(b.Dir)
}

// ModuleRoot returns the nearest directory at or above the working directory
// that holds the main module's go.mod (see devdb.ModuleRoot).
func ModuleRoot() (string, error) { return devdb.ModuleRoot() }

// goCommand prefers the go command on PATH and falls back to $GOROOT/bin/go.
func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

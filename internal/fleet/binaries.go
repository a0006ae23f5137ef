package fleet

import (
	"context"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/labelkit/labels/internal/proc"
)

// Binaries returns the executables of the main packages pkgs (./cmd/api,
// ...): the prebuilt ones in binDir (a command's --bin) when it is set, else
// built with one go build in the main module into outDir ("" for a
// temporary directory, which the result's Remove deletes), as logf says.
// Either way an executable missing for any of pkgs is an error.
func Binaries(ctx context.Context, binDir, outDir string, logf func(format string, args ...any), pkgs ...string) (*proc.Binaries, error) {
	b := &proc.Binaries{Dir: binDir}
	if binDir == "" {
		into := ""
		if outDir != "" {
			into = " into " + outDir
		}
		logf("building %s%s", strings.Join(pkgs, " "), into)
		var err error
		if b, err = proc.Build(ctx, &proc.BuildOpts{OutDir: outDir, Packages: pkgs}); err != nil {
			return nil, err
		}
	}
	for _, p := range pkgs {
		if name := path.Base(p); !b.Has(name) {
			_ = b.Remove()
			return nil, fmt.Errorf("no %s binary in %s", name, b.Dir)
		}
	}
	return b, nil
}

// CheckBinDir refuses a --bin that is set but is not a directory; "" (build
// the binaries) is fine.
func CheckBinDir(binDir string) error {
	if binDir == "" {
		return nil
	}
	if fi, err := os.Stat(binDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("--bin %q: not a directory", binDir)
	}
	return nil
}

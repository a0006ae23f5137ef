//go:build unix

package proc

import (
	"errors"
	"os"
	"syscall"
)

// signal sends sig to the child's process group (its pid, since Setpgid made
// it the group's leader), so that anything it started gets the signal too.
func (p *Process) signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

//go:build unix && !linux

package proc

import "syscall"

// sysProcAttr puts the child in a process group of its own, so that a Ctrl-C
// in the terminal reaches only the parent. Only Linux can also tie the child's
// life to the parent's.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

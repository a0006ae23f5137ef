package proc

import "syscall"

// sysProcAttr puts the child in a process group of its own, so that a Ctrl-C
// in the terminal reaches only the parent, and has the kernel kill it when
// the parent dies, so that nothing outlives a killed test binary or demo.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

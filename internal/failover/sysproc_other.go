//go:build unix && !linux

package failover

import "syscall"

// groupOfItsOwn puts a pg_autoctl in a process group of its own (which its
// postgres joins).
func groupOfItsOwn(a *syscall.SysProcAttr) {
	a.Setpgid = true
}

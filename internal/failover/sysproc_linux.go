package failover

import "syscall"

// groupOfItsOwn puts a pg_autoctl in a process group of its own (which its
// postgres joins), stopped at once (SIGQUIT: immediate shutdown) if this
// process dies without stopping it.
func groupOfItsOwn(a *syscall.SysProcAttr) {
	a.Setpgid = true
	a.Pdeathsig = syscall.SIGQUIT
}

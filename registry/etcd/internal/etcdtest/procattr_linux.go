package etcdtest

import "syscall"

// procAttr puts the server in a process group of its own and has the
// kernel kill it should the test binary die without stopping it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

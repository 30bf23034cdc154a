package nginxtest

import (
	"os"
	"syscall"
)

// procAttr puts nginx in a process group of its own and has the kernel
// send its master SIGTERM should the test binary die without stopping it
// (a go test -timeout panic, say). SIGTERM, not SIGKILL: a killed master
// leaves its worker running, still listening, while SIGTERM makes the
// master stop the worker first.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// killGroup kills nginx's master and its worker, which share the master's
// process group.
func killGroup(p *os.Process) {
	syscall.Kill(-p.Pid, syscall.SIGKILL)
	p.Kill()
}

//go:build !linux

package nginxtest

import (
	"os"
	"syscall"
)

// procAttr asks for nothing special where Linux's Pdeathsig is missing.
func procAttr() *syscall.SysProcAttr { return nil }

// killGroup kills nginx's master.
func killGroup(p *os.Process) { p.Kill() }

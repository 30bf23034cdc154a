//go:build !linux

package zktest

import "syscall"

// procAttr asks for nothing special where Linux's Pdeathsig is missing.
func procAttr() *syscall.SysProcAttr { return nil }

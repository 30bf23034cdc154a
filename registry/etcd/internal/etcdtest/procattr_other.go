//go:build !linux

package etcdtest

import "syscall"

// procAttr asks for nothing special where Linux's Pdeathsig is missing.
func procAttr() *syscall.SysProcAttr { return nil }

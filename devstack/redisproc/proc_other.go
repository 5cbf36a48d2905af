//go:build !linux

package redisproc

import (
	"os"
	"syscall"
)

var sigterm = syscall.SIGTERM

// sysProcAttr has no portable parent-death signal outside Linux; Stop and
// Kill remain the only ways redis is ended there.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(p *os.Process) error { return p.Kill() }

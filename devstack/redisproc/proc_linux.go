//go:build linux

package redisproc

import (
	"os"
	"syscall"
)

var sigterm = syscall.SIGTERM

// sysProcAttr puts redis in its own process group, so a terminal's Ctrl-C
// reaches only the test binary (which then stops redis in order), and asks
// the kernel to SIGKILL redis if the parent dies without cleaning up.
// Pdeathsig fires when the forking OS thread exits; the Go runtime keeps its
// threads alive, so in practice that means when the process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills the whole group so a forked AOF rewrite child dies too.
func killGroup(p *os.Process) error {
	return syscall.Kill(-p.Pid, syscall.SIGKILL)
}

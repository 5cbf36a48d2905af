package stack

import "syscall"

// Children die with the stack: a killed test or runner must not leave crawlers running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

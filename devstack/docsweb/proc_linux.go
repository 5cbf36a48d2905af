package docsweb

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts nginx's master and workers in a process group of their own, which
// killGroup ends whole, and kills the master should the test die first.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func killGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

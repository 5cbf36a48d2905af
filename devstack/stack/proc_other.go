//go:build !linux

package stack

import (
	"errors"
	"syscall"
	"time"
)

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

var errLinuxOnly = errors.New("stack: per-process CPU accounting and pinning need Linux /proc")

// CPUTime is the CPU time a process has used; Linux only.
func CPUTime(pid int) (time.Duration, error) { return 0, errLinuxOnly }

// Pin restricts a process to some CPUs; Linux only.
func Pin(pid int, cpus []int) error { return errLinuxOnly }

// RedisPID finds the redis-server process; Linux only.
func (s *Stack) RedisPID() (int, error) { return 0, errLinuxOnly }

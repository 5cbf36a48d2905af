package stack

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// Children die with the stack: a killed test or runner must not leave crawlers running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times; Linux fixes it at 100 for
// user space on every architecture Go supports.
const clockTick = 10 * time.Millisecond

// CPUTime is the user plus system CPU time a process has used so far, from
// /proc/<pid>/stat (threads included; children not).
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("stack: cpu time: %w", err)
	}
	// The command name (field 2) is in parentheses and may hold spaces; fields are
	// counted after its closing one: state is field 3, utime 14 and stime 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("stack: cpu time: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("stack: cpu time: short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stack: cpu time: malformed /proc/%d/stat", pid)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// Pin restricts every thread of a process to the given CPUs. Threads a process creates
// later inherit the mask of their creator, so pinning all current threads pins the
// process; the thread list is read twice to catch one started meanwhile.
func Pin(pid int, cpus []int) error {
	var mask [16]uint64 // 1024 CPUs, the kernel's default cpumask size
	for _, c := range cpus {
		if c < 0 || c >= len(mask)*64 {
			return fmt.Errorf("stack: pin: cpu %d out of range", c)
		}
		mask[c/64] |= 1 << (c % 64)
	}
	for range 2 {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return fmt.Errorf("stack: pin %d: %w", pid, err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask)))
			if errno != 0 && errno != syscall.ESRCH {
				return fmt.Errorf("stack: pin %d: %w", tid, errno)
			}
		}
	}
	return nil
}

// RedisPID finds the redis-server child by its port: redisproc keeps the process to
// itself, and redis-server names itself "redis-server host:port" in its command line.
func (s *Stack) RedisPID() (int, error) {
	_, port, _ := net.SplitHostPort(s.redis.Addr())
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, fmt.Errorf("stack: redis pid: %w", err)
	}
	for _, path := range procs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		cmd := string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		if !strings.Contains(cmd, "redis-server") || !(strings.Contains(cmd, ":"+port+" ") || strings.HasSuffix(strings.TrimSpace(cmd), ":"+port) || strings.Contains(cmd, "--port "+port+" ")) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err == nil {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("stack: no redis-server process for port %s", port)
}

// LoadAverage is the machine's 1, 5 and 15 minute load averages as /proc/loadavg gives them
// ("?" when unreadable), noted beside a measurement taken on a shared machine.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

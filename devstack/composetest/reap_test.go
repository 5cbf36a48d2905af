//go:build compose

package composetest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hostProc is a process as this host's /proc shows it.
type hostProc struct {
	pid, ppid int
	state     string // R, S, Z, …
	argv      []string
}

// hostProcs reads every process of this host.
func hostProcs() map[int]hostProc {
	procs := map[int]hostProc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// The fields after the command name (which may hold spaces) follow the last ')'.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if i < 0 || len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		procs[pid] = hostProc{pid: pid, ppid: ppid, state: f[0], argv: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")}
	}
	return procs
}

// under is root's descendants in procs.
func under(procs map[int]hostProc, root int) []hostProc {
	var out []hostProc
	for _, p := range procs {
		for q := p.ppid; q > 1; q = procs[q].ppid {
			if q == root {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// browserReaped SIGKILLs the browser of a renderer container, as a crash would, and waits
// until every process that browser had is gone, none left a zombie. A browser that stops
// (crashed, hung, over its memory cap, or at the renderer's exit) leaves its child
// processes to the container's PID 1: that must be an init that reaps them, not the
// renderer, which waits only for the browser it started.
func (s *Stack) browserReaped(id string) {
	s.t.Helper()
	pid1, err := strconv.Atoi(s.docker("inspect", "-f", "{{.State.Pid}}", id))
	if err != nil || pid1 <= 0 {
		s.t.Fatalf("renderer container %s has no running process: %v", id[:12], err)
	}
	var browser []hostProc
	main := 0
	for _, p := range under(hostProcs(), pid1) {
		if len(p.argv) == 0 || !strings.HasPrefix(p.argv[0], "/usr/lib/chromium/") {
			continue
		}
		browser = append(browser, p)
		if filepath.Base(p.argv[0]) == "chromium" && !slices.ContainsFunc(p.argv, func(a string) bool { return strings.HasPrefix(a, "--type=") }) {
			main = p.pid
		}
	}
	if main == 0 {
		s.t.Fatalf("renderer container %s runs no browser (%d Chromium processes under its PID 1, none the browser's own)", id[:12], len(browser))
	}
	if err := syscall.Kill(main, syscall.SIGKILL); err != nil {
		s.t.Fatalf("SIGKILL the browser (pid %d on this host; the engine must run here, as root): %v", main, err)
	}
	s.t.Logf("SIGKILLed the browser of renderer %s (%d processes)", id[:12], len(browser))
	s.eventually(time.Minute, "every process of the killed browser reaped", func() (bool, string) {
		var left []string
		for _, p := range browser {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
			if err != nil {
				continue
			}
			st := string(stat)
			if i := strings.LastIndexByte(st, ')'); i > 0 {
				st = st[:min(len(st), i+3)] // "pid (name) S"
			}
			left = append(left, st)
		}
		return len(left) == 0, fmt.Sprintf("%d left (a Z is a zombie PID 1 never reaped): %v", len(left), left)
	})
}

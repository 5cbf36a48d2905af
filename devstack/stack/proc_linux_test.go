package stack

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CPUTime must count a process's own work: the benchmark's per-process figures are its deltas.
func TestCPUTimeCountsWork(t *testing.T) {
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		now, err := CPUTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now-before >= 100*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time grew by %s in 5 s of busy looping", now-before)
		}
	}
	runtime.KeepAlive(x)
	if _, err := CPUTime(1 << 30); err == nil {
		t.Error("CPUTime of a pid that cannot exist did not fail")
	}
}

// Pin must restrict every thread of a running process, as the kernel reports it: a Go
// process has several, and one left unpinned would run the pipeline on the web's CPU.
func TestPinRestrictsEveryThread(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Fatal("pinning to a subset of CPUs needs at least two")
	}
	all := make([]int, runtime.NumCPU())
	for i := range all {
		all[i] = i
	}
	self := os.Getpid()
	if err := Pin(self, []int{1}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := Pin(self, all); err != nil {
			t.Errorf("unpin: %v", err)
		}
	}()
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(self) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) < 2 {
		t.Fatalf("test process has %d threads, want several", len(tasks))
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(self) + "/task/" + task.Name() + "/status")
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				if got := strings.TrimSpace(v); got != "1" {
					t.Errorf("thread %s: Cpus_allowed_list = %q, want 1", task.Name(), got)
				}
			}
		}
	}
}

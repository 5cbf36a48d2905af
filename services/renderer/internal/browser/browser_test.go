package browser

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/testwait"
)

// ownRSS is pid's resident memory alone, from /proc/<pid>/statm.
func ownRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// The memory watch sums a process and its descendants: a browser's memory is mostly in
// its renderer processes.
func TestTreeRSSCountsDescendants(t *testing.T) {
	sh := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sh.Process.Kill(); _ = sh.Wait() }()
	var child int
	testwait.Eventually(t, 5*time.Second, "the shell's child", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", sh.Process.Pid, sh.Process.Pid))
		if err != nil || len(strings.Fields(string(b))) == 0 {
			return false
		}
		child, _ = strconv.Atoi(strings.Fields(string(b))[0])
		return child > 0
	})
	defer func() { _ = exec.Command("kill", strconv.Itoa(child)).Run() }()
	parent, kid, tree := ownRSS(t, sh.Process.Pid), ownRSS(t, child), TreeRSS(sh.Process.Pid)
	if kid <= 0 || tree < parent+kid {
		t.Fatalf("TreeRSS(shell) = %d, want at least the shell's %d and its child's %d", tree, parent, kid)
	}
}

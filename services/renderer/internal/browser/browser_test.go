package browser

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
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
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child))
		return child > 0 && strings.TrimSpace(string(comm)) == "sleep"
	})
	defer func() { _ = exec.Command("kill", strconv.Itoa(child)).Run() }()
	// The processes have just started and their memory still moves: poll until the
	// measures agree. Counting the shell alone would never reach its child's share.
	var parent, kid, tree int64
	testwait.EventuallyState(t, 5*time.Second, "TreeRSS counting the child", func() (bool, string) {
		parent, kid, tree = ownRSS(t, sh.Process.Pid), ownRSS(t, child), TreeRSS(sh.Process.Pid)
		return kid > 64<<10 && tree >= parent+kid/2, fmt.Sprintf("TreeRSS(shell) = %d; the shell alone %d, its child %d", tree, parent, kid)
	})
}

// A profile left by a renderer that is gone is removed; a live one's is kept.
func TestRemoveOrphanProfiles(t *testing.T) {
	dir := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, fmt.Sprintf("%s%d-123", profilePrefix, gone.Process.Pid))
	live := filepath.Join(dir, fmt.Sprintf("%s%d-456", profilePrefix, os.Getppid()))
	other := filepath.Join(dir, "something-else")
	for _, d := range []string{orphan, live, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	removeOrphanProfiles(dir, slog.Default())
	for d, want := range map[string]bool{orphan: false, live: true, other: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
}

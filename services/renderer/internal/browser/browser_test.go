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

// The browser's environment is the allow-list alone: the renderer's TRAWL_* settings and
// anything else of its environment stay out.
func TestBrowserEnvIsAllowListed(t *testing.T) {
	t.Setenv("TRAWL_REDIS_URL", "redis://:secret@redis:6379/0")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("TZ", "Europe/Paris")
	env := browserEnv("/tmp/profile")
	allowed := map[string]bool{"PATH": true, "HOME": true, "TMPDIR": true, "LANG": true, "LC_ALL": true, "TZ": true,
		"XDG_CONFIG_HOME": true, "XDG_CACHE_HOME": true, "XDG_DATA_HOME": true, "XDG_RUNTIME_DIR": true}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if !allowed[k] || strings.Contains(v, "secret") {
			t.Errorf("the browser's environment has %q", kv)
		}
		got[k] = v
	}
	if got["HOME"] != "/tmp/profile" || got["TMPDIR"] != "/tmp/profile" || got["TZ"] != "Europe/Paris" {
		t.Errorf("HOME %q, TMPDIR %q, TZ %q; want the profile directory twice and the renderer's TZ", got["HOME"], got["TMPDIR"], got["TZ"])
	}
}

// A profile directory must be reachable by the browser's user through every parent.
func TestReachable(t *testing.T) {
	// Not t.TempDir: its parent is root's alone.
	root, err := os.MkdirTemp("", "trawl-reachable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		mode       os.FileMode
		owner      int // uid and gid of the directory
		uid, gid   int // who asks
		reachableW bool
	}{
		{"others may enter", 0o711, 0, 65534, 65534, true},
		{"others may not", 0o700, 0, 65534, 65534, false},
		{"the owner may", 0o700, 65534, 65534, 65534, true},
		{"the group may", 0o710, 4242, 65534, 4242, true},
		{"the group may not", 0o701, 4242, 65534, 4242, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if os.Getuid() != 0 && tc.owner != os.Getuid() {
				t.Fatal("chowning to another user needs root (make test and CI run as root)")
			}
			d := filepath.Join(root, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.Mkdir(d, tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, tc.mode); err != nil { // past the umask
				t.Fatal(err)
			}
			if err := os.Chown(d, tc.owner, tc.owner); err != nil {
				t.Fatal(err)
			}
			if err := reachable(d, tc.uid, tc.gid); (err == nil) != tc.reachableW {
				t.Errorf("reachable(%v owned %d) by %d:%d = %v, want reachable %t", tc.mode, tc.owner, tc.uid, tc.gid, err, tc.reachableW)
			}
		})
	}
}

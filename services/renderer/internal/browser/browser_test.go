package browser

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/testwait"
)

// ownPSS is pid's memory alone, as TreeMemory counts it.
func ownPSS(t *testing.T, pid int) int64 {
	t.Helper()
	n, ok := procPSS(pid)
	if !ok {
		t.Fatalf("/proc/%d/smaps_rollup has no Pss line", pid)
	}
	return n
}

// The memory watch sums a process and its descendants: a browser's memory is mostly in
// its renderer processes.
func TestTreeMemoryCountsDescendants(t *testing.T) {
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
	testwait.EventuallyState(t, 5*time.Second, "TreeMemory counting the child", func() (bool, string) {
		parent, kid, tree = ownPSS(t, sh.Process.Pid), ownPSS(t, child), TreeMemory(sh.Process.Pid)
		return kid > 16<<10 && tree >= parent+kid/2, fmt.Sprintf("TreeMemory(shell) = %d; the shell alone %d, its child %d", tree, parent, kid)
	})
}

// sharedMapEnv makes the test binary a process of TestTreeMemoryCountsSharedPagesOnce's
// tree: "leader" starts sharers and waits, "sharer" maps the file and touches its pages.
const sharedMapEnv = "TRAWL_TEST_SHARED_MAP"

const sharedMapSize = 256 << 20

// TestSharedMapProcess is not a test: it is the body of the processes of
// TestTreeMemoryCountsSharedPagesOnce, run as the test binary with sharedMapEnv set.
func TestSharedMapProcess(t *testing.T) {
	role, file, _ := strings.Cut(os.Getenv(sharedMapEnv), ":")
	switch role {
	case "leader":
		for i := range 4 {
			c := exec.Command(os.Args[0], "-test.run=^TestSharedMapProcess$")
			c.Env = append(os.Environ(), sharedMapEnv+"=sharer:"+file)
			c.Stdout = os.Stdout
			if err := c.Start(); err != nil {
				fmt.Println("sharer", i, err)
				os.Exit(1)
			}
		}
		time.Sleep(time.Minute)
		os.Exit(0)
	case "sharer":
		f, err := os.Open(file)
		if err != nil {
			os.Exit(1)
		}
		m, err := syscall.Mmap(int(f.Fd()), 0, sharedMapSize, syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			os.Exit(1)
		}
		var sum byte
		for i := 0; i < len(m); i += os.Getpagesize() {
			sum += m[i]
		}
		fmt.Println("mapped", sum)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
}

// Pages several of the browser's processes share count once: four processes each mapping
// the same 256 MiB file hold 256 MiB between them, where their resident sizes add up to
// 1 GiB.
func TestTreeMemoryCountsSharedPagesOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "shared")
	if err := os.WriteFile(file, make([]byte, sharedMapSize), 0o600); err != nil {
		t.Fatal(err)
	}
	leader := exec.Command(os.Args[0], "-test.run=^TestSharedMapProcess$")
	leader.Env = append(os.Environ(), sharedMapEnv+"=leader:"+file)
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := leader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-leader.Process.Pid, syscall.SIGKILL); _ = leader.Wait() }()
	sc := bufio.NewScanner(out)
	for mapped := 0; mapped < 4; {
		if !sc.Scan() {
			t.Fatalf("the sharers did not all map the file (%d did): %v", mapped, sc.Err())
		}
		if strings.HasPrefix(sc.Text(), "mapped") {
			mapped++
		}
	}
	got := TreeMemory(leader.Process.Pid)
	// Each Go process adds a few MiB of its own (15 or so under the race detector).
	if got < sharedMapSize || got > 2*sharedMapSize {
		t.Errorf("TreeMemory = %d MiB for four processes sharing one %d MiB mapping, want %[2]d to %d", got>>20, sharedMapSize>>20, 2*sharedMapSize>>20)
	}
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

// Chromium starts in a TMPDIR of maxProfileDir bytes and not in one a byte longer: the
// limit checkProfileRoom holds the profile directories to is the installed Chromium's.
func TestChromiumSocketRoom(t *testing.T) {
	chromium := chromiumPath(t)
	root, err := os.MkdirTemp("", "room-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	for _, tc := range []struct {
		name   string
		length int
		starts bool
	}{
		{"the longest", maxProfileDir, true},
		{"a byte longer", maxProfileDir + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pad := tc.length - len(root) - 1
			if pad < 1 {
				t.Fatalf("the system's temporary directory %s is too long for this test", root)
			}
			dir := filepath.Join(root, strings.Repeat("x", pad))
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--no-first-run", "--disable-gpu",
				"--user-data-dir="+filepath.Join(dir, "profile"), "--dump-dom", "data:text/html,<p>room</p>")
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir}
			out, err := cmd.Output()
			if started := err == nil && strings.Contains(string(out), "<p>room</p>"); started != tc.starts {
				t.Errorf("Chromium with a TMPDIR of %d bytes started: %v (%v), want %v", len(dir), started, err, tc.starts)
			}
		})
	}
}

// A data directory whose profile directories could pass maxProfileDir is refused, with
// the TMPDIR to give instead.
func TestCheckProfileRoom(t *testing.T) {
	longest := "/" + strings.Repeat("d", maxProfileDir-1-profileNameMax-1)
	for _, tc := range []struct {
		name, dataDir string
		ok            bool
	}{
		{"/tmp", "/tmp", true},
		{"the longest", longest, true},
		{"a byte longer", longest + "d", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkProfileRoom(tc.dataDir)
			if (err == nil) != tc.ok {
				t.Fatalf("checkProfileRoom(%d bytes): %v, want ok %v", len(tc.dataDir), err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "TMPDIR of at most") {
				t.Errorf("the error does not say what to do: %v", err)
			}
		})
	}
}

package browser

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/testwait"
)

// heldChromium is a Chromium whose launches the test holds: while the file hold exists,
// a launch writes the file started and waits before it execs the browser.
type heldChromium struct {
	dir, path, hold, started string
}

// chromiumPath is the installed Chromium.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("this test needs Debian's chromium (make test installs it): %v", err)
	}
	return p
}

// wrapChromium writes a shell script that runs the installed Chromium after the shell
// code before, which may use the directory marks: the browser's user (not root) enters
// dir, runs the script and writes in marks. It returns dir, the script and marks.
func wrapChromium(t *testing.T, before func(dir, marks string) string) (string, string, string) {
	t.Helper()
	chromium := chromiumPath(t)
	dir, err := os.MkdirTemp("", "trawl-launch-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	marks := filepath.Join(dir, "marks")
	if err := os.Mkdir(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(marks, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	path := filepath.Join(dir, "chromium")
	script := fmt.Sprintf("#!/bin/sh\n%s\nexec %s \"$@\"\n", before(dir, marks), chromium)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, path, marks
}

func newHeldChromium(t *testing.T) *heldChromium {
	t.Helper()
	h := &heldChromium{}
	h.dir, h.path, _ = wrapChromium(t, func(dir, marks string) string {
		h.hold, h.started = filepath.Join(dir, "hold"), filepath.Join(marks, "started")
		return fmt.Sprintf("if [ -e %[1]s ]; then : > %[2]s; while [ -e %[1]s ]; do sleep 0.05; done; fi", h.hold, h.started)
	})
	return h
}

func (h *heldChromium) options() Options { return launchOptions(h.path, h.dir) }

// launchOptions start the browser at path, with its profiles in dir.
func launchOptions(path, dir string) Options {
	o := Options{Path: path, DataDir: dir}
	if os.Getuid() == 0 {
		o.UID, o.GID = 65534, 65534
	}
	return o
}

// opened is what NewTab returned.
type opened struct {
	tab *Tab
	err error
}

// relaunch restarts b's generation gen and asks for a tab, which launches the next browser;
// it returns once that launch is held, with where the tab will come.
func (h *heldChromium) relaunch(t *testing.T, ctx context.Context, b *Browser, gen int) <-chan opened {
	t.Helper()
	if err := os.WriteFile(h.hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.Restart(gen, "test")
	tab := make(chan opened, 1)
	go func() {
		tb, err := b.NewTab(ctx)
		tab <- opened{tb, err}
	}()
	testwait.Eventually(t, 10*time.Second, "the relaunch reached the held Chromium", func() bool {
		_, err := os.Stat(h.started)
		return err == nil
	})
	return tab
}

// A launch takes seconds (30 at most before it is given up): the calls that only look at
// the browser, and Close, must not wait for one, and a tab asked for meanwhile waits for
// that launch rather than starting a second browser.
func TestLaunchHoldsNoLock(t *testing.T) {
	h := newHeldChromium(t)
	ctx := testwait.Context(t)
	b, err := Start(ctx, h.options())
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(b.Close)
	tab, err := b.NewTab(ctx)
	if err != nil {
		t.Fatalf("tab: %v", err)
	}
	defer tab.Close()

	first := h.relaunch(t, ctx, b, tab.gen)

	quick := func(name string, call func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { call(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Errorf("%s waited for the launch in progress", name)
		}
	}
	quick("PID", func() {
		if pid := b.PID(); pid != 0 {
			t.Errorf("PID %d while no browser runs", pid)
		}
	})
	quick("Lost", func() {
		if lost, why := tab.Lost(); !lost || why != "test" {
			t.Errorf("old tab lost=%v (%q), want true (test)", lost, why)
		}
	})
	quick("Check", func() { b.Check(tab.gen) })
	quick("a tab with a short deadline", func() {
		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if _, err := b.NewTab(sctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("tab during the launch: %v, want its deadline", err)
		}
	})

	if err := os.Remove(h.hold); err != nil {
		t.Fatal(err)
	}
	o := <-first
	if o.err != nil {
		t.Fatalf("tab after the relaunch: %v", o.err)
	}
	defer o.tab.Close()
	if o.tab.gen != tab.gen+1 {
		t.Errorf("tab of generation %d, want %d: one launch, not two", o.tab.gen, tab.gen+1)
	}
	if b.PID() == 0 {
		t.Error("no browser after the relaunch")
	}
}

// A browser closed while it launches does not keep the browser the launch started.
func TestCloseDuringLaunch(t *testing.T) {
	h := newHeldChromium(t)
	ctx := testwait.Context(t)
	b, err := Start(ctx, h.options())
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	first := h.relaunch(t, ctx, b, b.cur.gen)
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close waited for the launch in progress")
	}
	if err := os.Remove(h.hold); err != nil {
		t.Fatal(err)
	}
	if o := <-first; !errors.Is(o.err, errClosed) {
		t.Fatalf("tab of a browser closed during its launch: %v, want %v", o.err, errClosed)
	}
	testwait.Eventually(t, 10*time.Second, "the browser launched for a closed Browser stopped", func() bool {
		return len(tree(os.Getpid())) == 1 // this process alone
	})
}

// A browser that dies before it listens is launched again, up to startAttempts times in
// all; one that cannot be executed is not. The crash is Chromium's wrapper killing itself
// with SIGSEGV before it execs the browser, on the first launches. The real Chromium may
// itself die at start-up on a loaded machine (the reason for launching again), so a
// launch that reached it is counted apart: a test that needed it to start first time
// would fail for what the code handles.
func TestStartLaunchesAgainABrowserThatDiedAtStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		crashes int    // launches that die before Chromium runs
		wantErr string // "" when Start succeeds
	}{
		{"no crash", 0, ""},
		{"one crash", 1, ""},
		{"every launch crashes", startAttempts, fmt.Sprintf("launch %d of %d", startAttempts, startAttempts)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var launches string
			dir, path, _ := wrapChromium(t, func(_, marks string) string {
				launches = filepath.Join(marks, "launches")
				return fmt.Sprintf("if [ $(cat %[1]s 2>/dev/null | wc -l) -lt %[2]d ]; then echo crash >> %[1]s; echo 'dying at start-up' >&2; kill -SEGV $$; fi\necho chromium >> %[1]s",
					launches, tc.crashes)
			})
			b, err := Start(testwait.Context(t), launchOptions(path, dir))
			if err == nil {
				t.Cleanup(b.Close)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Start: %v, want a browser", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "dying at start-up")):
				t.Fatalf("Start: %v, want an error naming %q and the browser's output", err, tc.wantErr)
			}
			data, rerr := os.ReadFile(launches)
			if rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				t.Fatal(rerr)
			}
			crashes, real := strings.Count(string(data), "crash\n"), strings.Count(string(data), "chromium\n")
			if crashes != tc.crashes {
				t.Errorf("%d launches crashed, want %d:\n%s", crashes, tc.crashes, data)
			}
			if err == nil && (real < 1 || crashes+real > startAttempts) {
				t.Errorf("Start succeeded after %d crashes and %d launches of Chromium, want at least one of it, %d launches in all at most", crashes, real, startAttempts)
			}
			if err != nil && real != 0 {
				t.Errorf("Chromium launched %d times after %d crashes, over the bound of %d launches", real, crashes, startAttempts)
			}
			if err == nil && b.PID() == 0 {
				t.Error("Start succeeded with no browser running")
			}
		})
	}
	t.Run("not executable", func(t *testing.T) {
		// A pause far beyond what a start costs on a loaded machine (over a second seen
		// with two race suites running), so that only a wait to launch again can reach it.
		// No test of this package runs in parallel.
		pause := startRetryPause
		startRetryPause = 30 * time.Second
		t.Cleanup(func() { startRetryPause = pause })
		dir, _, _ := wrapChromium(t, func(_, _ string) string { return "" })
		start := time.Now()
		_, err := Start(testwait.Context(t), launchOptions(filepath.Join(dir, "no-chromium"), dir))
		if !errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "launch ") {
			t.Fatalf("Start of a missing binary: %v, want its error (not found) at once, not launched again", err)
		}
		if d := time.Since(start); d >= startRetryPause {
			t.Errorf("Start of a missing binary took %v: it waited to launch again", d)
		}
	})
}

// A stopped browser's profile is removed once the processes it leaves are gone, not while
// one still writes there (Chromium's network service writes its cache index as it exits).
// The browser's wrapper leaves a process that waits for the browser to end and then
// writes into its profile.
func TestProfileRemovedAfterTheBrowsersProcesses(t *testing.T) {
	var written string
	dir, path, _ := wrapChromium(t, func(_, marks string) string {
		written = filepath.Join(marks, "written")
		return fmt.Sprintf(`for a in "$@"; do case "$a" in --user-data-dir=*) prof="${a#--user-data-dir=}";; esac; done
browser=$$
( while kill -0 $browser 2>/dev/null; do sleep 0.05; done; sleep 0.2; mkdir -p "$prof/Default/Cache"; : > %s ) </dev/null >/dev/null 2>&1 &`, written)
	})
	// Profiles made in a directory like /tmp, where the browser's user could make one again.
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	b, err := Start(testwait.Context(t), launchOptions(path, dir))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	profile := b.cur.dir
	b.Close()
	testwait.Eventually(t, 10*time.Second, "the process the browser left wrote into its profile", func() bool {
		_, err := os.Stat(written)
		return err == nil
	})
	if _, err := os.Stat(profile); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the profile %s is still there after its browser and its processes ended (%v)", profile, err)
	}
}

// Package chromiumproc starts Debian's headless Chromium for the tests that drive a real
// browser (the status page, the replay of a WACZ in ReplayWeb.page).
package chromiumproc

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/trawl/trawl/shared/testwait"
)

// Launches bounds the launches of one Start. Chromium can crash before it listens,
// rarely, on a loaded machine (the renderer meets it too and launches again:
// services/renderer/internal/browser's startAttempts); such a launch is tried again.
const Launches = 3

// Path finds Debian's chromium. Without it the test fails: nothing else can stand in for a
// browser.
func Path(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (%v): install Debian's package with `apt-get install -y chromium` "+
			"(the make target that runs this test does it); this test drives a real headless browser", err)
	}
	return p
}

// Start launches headless Chromium on a profile of its own, with extra added to the flags
// every test needs, and returns a tab and what stops the browser (also called when the
// test ends). A browser that dies at start-up is launched again, up to Launches times; the
// test fails with the browser's output when none starts. ctx bounds the browser's whole
// life.
func Start(t testing.TB, ctx context.Context, extra ...chromedp.ExecAllocatorOption) (tab context.Context, stop func()) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		out := &testwait.Buffer{}
		opts := append([]chromedp.ExecAllocatorOption{
			chromedp.ExecPath(Path(t)),
			chromedp.Headless,
			chromedp.NoSandbox, // tests run as root in CI
			chromedp.DisableGPU,
			chromedp.NoFirstRun,
			chromedp.NoDefaultBrowserCheck,
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.UserDataDir(t.TempDir()),
			chromedp.WindowSize(1280, 1000),
			chromedp.CombinedOutput(out),
		}, extra...)
		alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
		tab, cancelTab := chromedp.NewContext(alloc)
		stop := func() { cancelTab(); cancelAlloc() }
		err := chromedp.Do(tab) // the first call starts the browser
		if err == nil {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("chromium output:\n%s", out.String())
				}
			})
			return tab, stop
		}
		stop()
		// chromedp's error for a browser whose output ended before it printed its DevTools
		// address: it died at start-up.
		if !strings.Contains(err.Error(), "chrome failed to start") || attempt == Launches {
			t.Fatalf("start chromium (launch %d of %d): %v\n%s", attempt, Launches, err, out.String())
		}
		t.Logf("chromium died at start-up (launch %d of %d): %v; launching it again", attempt, Launches, err)
	}
}

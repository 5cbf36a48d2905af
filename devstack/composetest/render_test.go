//go:build compose

package composetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/synthweb"
)

// The render profile, started with the README's command (TRAWL_RENDER=auto, two renderers)
// on a web with the single-page-app section: the renderer image builds (Debian's chromium
// installed by apt-get during `docker build`), two renderers run, the app's script-only
// pages are crawled (each page's JSON, which only its script asks for, was requested), the
// robots-disallowed request the script makes never reaches the web, and every request, the
// browsers' included, keeps the politeness the other profiles keep. A browser killed
// afterwards leaves no zombie in its container.
func TestRenderProfile(t *testing.T) {
	for _, tool := range tools {
		t.Run(tool.Name, func(t *testing.T) { renderProfile(t, tool) })
	}
}

const renderers = 2

func renderProfile(t *testing.T, tool Tool) {
	cmd := readmeCommand(t, "the render profile", func(a []string) bool { return has(a, "render") })
	if !strings.HasPrefix(cmd, "TRAWL_RENDER=auto ") || !strings.Contains(cmd, fmt.Sprintf("--scale renderer=%d", renderers)) {
		t.Fatalf("README's render command %q: the test expects TRAWL_RENDER=auto and %d renderers", cmd, renderers)
	}
	// The web is started before the README's command and must expect what it does: the
	// same TRAWL_RENDER (else Compose would recreate it mid-crawl), seeds on every host.
	seeds := make([]string, webHosts+2)
	for i := range seeds {
		seeds[i] = fmt.Sprintf("http://vhost%d.synth.test:%d/", i+1, webPort)
	}
	s := newStack(t, tool, 10, "TRAWL_TEST_WEB_SPA=true", "TRAWL_RENDER=auto", "TRAWL_SEEDS="+strings.Join(seeds, ","))

	// The renderer image alone first: its build is the one that needs Debian's archive, and
	// its time is the cost this profile adds to the compose test.
	start := time.Now()
	if out, err := s.output(buildTimeout, "--profile", "render", "build", "renderer"); err != nil {
		t.Fatalf("the renderer image does not build (Debian's chromium is installed with apt-get during docker build, so a Debian mirror must answer from the build container): %v\n%s",
			err, lastLines(out, 40))
	}
	t.Logf("%s: renderer image built in %s", tool.Name, time.Since(start).Round(time.Second))

	s.up(cmd)
	s.waitStatus(buildTimeout)
	snap := s.waitRequests(0)
	exp := snap.Expected
	if len(exp.Browser) == 0 {
		t.Fatal("the web expects no browser request: it does not serve the single-page app, or does not expect rendering")
	}
	// Healthy, not merely running: a renderer in a crash loop is running between restarts.
	s.eventually(2*time.Minute, fmt.Sprintf("%d renderer containers healthy", renderers), func() (bool, string) {
		ids := strings.Fields(s.docker("ps", "-q", "--filter", "label=com.docker.compose.project="+project,
			"--filter", "label=com.docker.compose.service=renderer", "--filter", "health=healthy"))
		return len(ids) == renderers, fmt.Sprintf("%d healthy", len(ids))
	})
	// Pages go to the renderers after they are fetched, and status.json does not count
	// the render queue: the crawl is over once the web saw every request it expects and
	// the status page then stays quiet.
	s.eventually(crawlTimeout, "every request the web expects, the browsers' included", func() (bool, string) {
		s.upExited()
		snap, err := s.webLog()
		if err != nil {
			return false, err.Error()
		}
		missing := missingRequests(snap)
		return len(missing) == 0, fmt.Sprintf("%d not yet requested, such as %v", len(missing), missing[:min(3, len(missing))])
	})
	st := s.waitDone(crawlTimeout)
	snap = s.judge(st, 0)

	browsers := map[string]bool{}
	for _, r := range snap.Requests {
		u := origin(r.Host) + r.Path
		if strings.HasPrefix(r.Path, "/private/") {
			t.Errorf("the robots-disallowed %s was requested (from %s, %s)", u, r.Remote, r.Agent)
		}
		if exp.Browser[u] {
			browsers[r.Remote] = true
		}
	}
	counts := synthweb.CountByURL(snap.Requests, origin)
	for u := range exp.Browser {
		if counts[u] == 0 {
			t.Errorf("the browser's request %s was never made: its page was not rendered", u)
		}
	}
	app := 0
	for u := range exp.Fetch {
		if strings.Contains(u, "/app/") {
			app++
			if counts[u] == 0 {
				t.Errorf("script-only page never crawled: %s", u)
			}
		}
	}
	if app == 0 {
		t.Error("the web expects no script-only page")
	}
	t.Logf("%s: %d script-only pages, %d browser requests, made from %d renderer address(es)", tool.Name, app, len(exp.Browser), len(browsers))
	s.browserReaped(s.containers("renderer")[0])
}

// missingRequests are the URLs the web expects that it has not been asked for yet.
func missingRequests(snap synthweb.Snapshot) []string {
	counts := synthweb.CountByURL(snap.Requests, origin)
	var missing []string
	for u := range snap.Expected.Fetch {
		if counts[u] == 0 {
			missing = append(missing, u)
		}
	}
	return missing
}

package itest

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
)

// TestRobotsRedirectHopIsItsOwnTask: robots.txt redirected on the same host is not
// followed inline; each hop is one task's one request, so the scheduler's gap holds
// between them. The test plays the scheduler, re-dispatching the URL a minimum delay
// after each robots outcome, and checks the gaps in the site's own request log.
func TestRobotsRedirectHopIsItsOwnTask(t *testing.T) {
	const minDelay = 250 * time.Millisecond
	type hit struct {
		path string
		at   time.Time
	}
	var mu sync.Mutex
	var hits []hit
	logged := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits = append(hits, hit{r.URL.Path, time.Now()})
			mu.Unlock()
			h(w, r)
		}
	}
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{
		"/robots.txt": logged(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/robots-real.txt", http.StatusMovedPermanently)
		}),
		"/robots-real.txt": logged(text("User-agent: *\nDisallow: /private\n")),
		"/page":            logged(html(pageHTML)),
	})
	st.start(st.config(nil), "a")

	// Every task of the host waits minDelay after the previous one's outcome, as the
	// scheduler spaces a host's tasks.
	run := func(url string) crawlmsg.Outcome {
		tk := task(url)
		st.publishTask(tk)
		o := st.outcome(tk.Lease)
		time.Sleep(minDelay) // the scheduler's gap before the host's next task
		return o
	}
	if o := run(s.URL + "/page"); o.Kind != crawlmsg.OutcomeRobots || o.Status != http.StatusMovedPermanently || !o.Requested {
		t.Errorf("first task: %+v, want a robots outcome for the 301 alone", o)
	}
	if o := run(s.URL + "/page"); o.Kind != crawlmsg.OutcomeRobots || o.Status != http.StatusOK {
		t.Errorf("second task: %+v, want robots for the redirect target", o)
	}
	if o := run(s.URL + "/private/x"); o.Kind != crawlmsg.OutcomeDisallowed {
		t.Errorf("private URL: %+v, want disallowed by the redirected robots.txt", o)
	}
	if o := run(s.URL + "/page"); o.Kind != crawlmsg.OutcomeFetched {
		t.Errorf("page: %+v", o)
	}

	mu.Lock()
	defer mu.Unlock()
	var paths []string
	for i, h := range hits {
		paths = append(paths, h.path)
		if i > 0 {
			if gap := h.at.Sub(hits[i-1].at); gap < minDelay {
				t.Errorf("%s requested %s after %s, below the host's %s gap", h.path, gap, hits[i-1].path, minDelay)
			}
		}
	}
	if want := []string{"/robots.txt", "/robots-real.txt", "/page"}; !slices.Equal(paths, want) {
		t.Errorf("site saw %v, want %v", paths, want)
	}
}

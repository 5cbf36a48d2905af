package itest

import (
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
)

// TestConditionalRecrawl: a recrawl task sends its validators, a 304 is an answer like any
// other (fetched, not retried), and the page carries the task's state to the parser.
func TestConditionalRecrawl(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	var mu sync.Mutex
	got := map[string]http.Header{}
	validated := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.URL.Path] = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("ETag", `"v2"`)
		if r.Header.Get("If-None-Match") == `"v2"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, pageHTML)
	}
	s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt), "/same": validated, "/stale": validated, "/first": validated})
	st.start(st.config(nil), "a")
	st.warmRobots(s)

	const lm = "Mon, 02 Jan 2006 15:04:05 GMT"
	for _, tc := range []struct {
		path     string
		state    *crawlmsg.Recrawl
		inm, ims string
		status   int
	}{
		{"/first", nil, "", "", 200},
		{"/same", &crawlmsg.Recrawl{ETag: `"v2"`, LastModified: lm, Interval: 1000}, `"v2"`, lm, 304},
		{"/stale", &crawlmsg.Recrawl{ETag: `"v1"`, Interval: 1000}, `"v1"`, "", 200},
	} {
		t.Run(tc.path, func(t *testing.T) {
			tk := task(s.URL + tc.path)
			tk.Recrawl = tc.state
			st.publishTask(tk)
			if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeFetched || o.Status != tc.status {
				t.Fatalf("outcome %+v, want fetched %d", o, tc.status)
			}
			mu.Lock()
			h := got[tc.path]
			mu.Unlock()
			if h.Get("If-None-Match") != tc.inm || h.Get("If-Modified-Since") != tc.ims {
				t.Fatalf("request sent If-None-Match %q If-Modified-Since %q, want %q %q", h.Get("If-None-Match"), h.Get("If-Modified-Since"), tc.inm, tc.ims)
			}
			p := st.page(tk.Lease)
			if p.Meta.Status != tc.status || (tc.status == 304 && len(p.Body) != 0) {
				t.Fatalf("page status %d body %d bytes", p.Meta.Status, len(p.Body))
			}
			if (p.Meta.Recrawl == nil) != (tc.state == nil) || (tc.state != nil && p.Meta.Recrawl.ETag != tc.state.ETag) {
				t.Fatalf("page recrawl state %+v, want the task's %+v", p.Meta.Recrawl, tc.state)
			}
		})
	}
}

// TestRecrawlWithoutPage: a recrawl that stores no page (its server is gone) reports the
// URL's state in its outcome, so that the scheduler can schedule it again should it end
// failed; a first fetch's outcome carries none.
func TestRecrawlWithoutPage(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt)})
	url := s.URL
	s.Close() // nothing listens there any more
	st.start(st.config(nil), "a")

	state := &crawlmsg.Recrawl{ETag: `"v1"`, Interval: 5000}
	for _, tc := range []struct {
		name  string
		state *crawlmsg.Recrawl
	}{{"first fetch", nil}, {"recrawl", state}} {
		t.Run(tc.name, func(t *testing.T) {
			tk := task(url + "/page")
			tk.Depth, tk.Recrawl = 2, tc.state
			st.publishTask(tk)
			o := st.outcome(tk.Lease)
			if o.Kind != crawlmsg.OutcomeRobotsUnavailable {
				t.Fatalf("outcome %+v, want robots-unavailable", o)
			}
			if tc.state == nil {
				if o.Recrawl != nil {
					t.Fatalf("outcome recrawl %+v, want none", o.Recrawl)
				}
				return
			}
			if o.Recrawl == nil || o.Recrawl.URL != tk.URL || o.Recrawl.Depth != 2 || o.Recrawl.State != *state {
				t.Fatalf("outcome recrawl %+v, want the task's URL, depth and state", o.Recrawl)
			}
		})
	}
}

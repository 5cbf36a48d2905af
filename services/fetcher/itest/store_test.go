package itest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/topology"
)

// warmRobots makes the site's robots.txt cached, so the next task of the origin fetches
// its page.
func (st *stack) warmRobots(s *site) {
	st.t.Helper()
	tk := task(s.URL + "/robots-warm")
	st.publishTask(tk)
	if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeRobots {
		st.t.Fatalf("robots outcome %+v", o)
	}
}

// streamState is a stream's state now: messages held, last sequence stored.
func (st *stack) streamState(name string) jetstream.StreamState {
	st.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := st.js.Stream(ctx, name)
	if err != nil {
		st.t.Fatal(err)
	}
	return s.CachedInfo().State
}

// setPagesLimits changes the pages stream's message and byte caps under a running fetcher.
func (st *stack) setPagesLimits(maxMsg int32, maxBytes int64) {
	st.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := st.js.Stream(ctx, topology.StreamPages)
	if err != nil {
		st.t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize, cfg.MaxBytes, cfg.Discard = maxMsg, maxBytes, jetstream.DiscardNew
	if _, err := st.js.UpdateStream(ctx, cfg); err != nil {
		st.t.Fatal(err)
	}
}

// TestTooLargePage: a response whose page message cannot be stored ends the URL with a
// counted too-large outcome and no page; it is never reported fetched, and never dropped
// in silence. A body alone never makes a page too large: above what fits inline, it goes
// by reference.
func TestTooLargePage(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("a", 300<<10)
	bigBody := "<html><body>" + strings.Repeat("<p>filler</p>", 50<<10) + "</body></html>" // ~650 KB
	cases := []struct {
		name  string
		nopts natsembed.Options
		// shrink, when set, lowers the pages stream's message size under the fetcher.
		shrink int32
		route  http.HandlerFunc
	}{
		{
			// The page's metadata (its headers) exceeds the server's max_payload: the
			// client refuses it.
			name:  "over max_payload",
			nopts: natsembed.Options{MaxPayload: 256 << 10},
			route: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Pad", pad)
				html(pageHTML)(w, r)
			},
		},
		{
			// The stream's own message cap is below the inline body: JetStream refuses it.
			name:   "over the stream's message size",
			shrink: 64 << 10,
			route:  html(strings.Repeat("<p>filler</p>", 20<<10)), // ~260 KB, under the 1 MiB inline threshold
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStackWith(t, c.nopts)
			s := newSite(t, map[string]http.HandlerFunc{
				"/robots.txt": text(robotsTxt),
				"/huge":       c.route,
				"/big":        html(bigBody),
			})
			in := st.start(st.config(map[string]string{"TRAWL_MAX_HEADER_BYTES": "1MiB"}), "a")
			st.warmRobots(s)
			if c.shrink > 0 {
				st.setPagesLimits(c.shrink, -1)
			}

			tk := task(s.URL + "/huge")
			st.publishTask(tk)
			o := st.outcome(tk.Lease)
			if o.Kind != crawlmsg.OutcomeTooLarge || !o.Permanent || !o.Requested || o.Status != 200 || o.Error == "" {
				t.Fatalf("outcome %+v, want a permanent too-large after a 200", o)
			}
			st.pollPages()
			if _, ok := st.pages[tk.Lease]; ok {
				t.Error("a page was stored for a too-large outcome")
			}
			in.waitMetric(t, "trawl_fetcher_too_large_total", 1)
			in.waitMetric(t, `trawl_fetcher_outcomes_total{kind="too-large"}`, 1)

			if c.shrink > 0 {
				return
			}
			// On the same small server a body far above max_payload travels by reference.
			tk = task(s.URL + "/big")
			st.publishTask(tk)
			if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeFetched || o.Bytes != int64(len(bigBody)) {
				t.Fatalf("big page outcome %+v", o)
			}
			p := st.page(tk.Lease)
			if p.Meta.BodyRef == nil || len(p.Body) != 0 || p.Meta.BodyRef.Size != int64(len(bigBody)) {
				t.Fatalf("big page meta %+v with %d inline octets, want a body reference", p.Meta, len(p.Body))
			}
			st.checkBody(p, bigBody)
		})
	}
}

// checkBody reads a page's referenced body from the object store.
func (st *stack) checkBody(p *crawlmsg.Page, want string) {
	st.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	obs, err := st.js.ObjectStore(ctx, p.Meta.BodyRef.Bucket)
	if err != nil {
		st.t.Fatal(err)
	}
	got, err := obs.GetBytes(ctx, p.Meta.BodyRef.Name)
	if err != nil {
		st.t.Fatal(err)
	}
	if !bytes.Equal(got, []byte(want)) {
		st.t.Errorf("stored body has %d octets, want the %d served", len(got), len(want))
	}
}

// TestOutcomeOnlyAfterPage: while the pages stream refuses a page (full), its outcome is
// not stored either — a stored outcome would count the URL fetched with no page. Once the
// stream takes the page again, the page is stored first and the outcome after it.
func TestOutcomeOnlyAfterPage(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt), "/page": html(pageHTML)})
	in := st.start(st.config(nil), "a")
	st.warmRobots(s)
	// The last sequence, not the count: the harness acks the robots.txt outcome, and the
	// stream may drop it while the test watches.
	before := st.streamState(topology.StreamFetched).LastSeq
	st.setPagesLimits(8<<20, 64) // smaller than any page: every page is refused

	tk := task(s.URL + "/page")
	st.publishTask(tk)
	// The outcome must not appear while the page is refused: wait until the fetcher has
	// been refused twice, checking all along that no outcome was stored.
	deadline := time.Now().Add(waitFor)
	for in.metric(t, `trawl_fetcher_publish_retries_total{what="page"}`) < 2 {
		if n := st.streamState(topology.StreamFetched).LastSeq; n != before {
			t.Fatalf("an outcome was stored while its page was refused (last sequence %d, %d before)", n, before)
		}
		if time.Now().After(deadline) {
			t.Fatal("the fetcher never retried the refused page")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := st.streamState(topology.StreamFetched).LastSeq; n != before {
		t.Fatalf("an outcome was stored while its page was refused (last sequence %d, %d before)", n, before)
	}

	st.setPagesLimits(8<<20, 8<<30)
	o := st.outcome(tk.Lease)
	if o.Kind != crawlmsg.OutcomeFetched {
		t.Fatalf("outcome %+v", o)
	}
	p := st.page(tk.Lease)
	if p.Meta.URL != tk.URL {
		t.Errorf("page %+v", p.Meta)
	}
	if got := in.metric(t, "trawl_fetcher_publish_failures_total"); got != 0 {
		t.Errorf("%v tasks dropped", got)
	}
}

// TestRequestEndsBeforeLease: a task that passes the start check, then waits on a slow
// Redis before its request, still ends that request deadlineSlack (2 s) before its lease:
// the request's context carries the lease's cut-off, not a fresh full fetch timeout.
func TestRequestEndsBeforeLease(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	var mu sync.Mutex
	var ended time.Time
	s := newSite(t, map[string]http.HandlerFunc{
		// robots.txt is the task's request (a cache miss); it never answers.
		"/robots.txt": func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			mu.Lock()
			ended = time.Now()
			mu.Unlock()
		},
	})
	st.start(st.config(nil), "a") // fetch timeout 5s
	// A first task on another origin: once its outcome is in, the fetcher has pinged Redis
	// and waits in a pull, so the next task is taken at once, Redis stalled or not.
	st.warmRobots(newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt)}))

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	tk := task(s.URL + "/page")
	// How late the task may reach the start check and still pass it (fetch timeout and
	// slack before its deadline): room for a loaded machine.
	const late = 1500 * time.Millisecond
	issued := time.Now()
	deadline := issued.Add(5*time.Second + 2*time.Second + late)
	tk.Deadline = deadline.UnixMilli()
	// Redis answers nothing for 2 s more than that: the robots lookup after the start check
	// stalls, so that a request given a fresh full fetch timeout would end at the deadline.
	if err := st.rdb.Do(ctx, "CLIENT", "PAUSE", strconv.FormatInt((2*time.Second+late).Milliseconds(), 10), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	st.publishTask(tk)
	o := st.outcome(tk.Lease)
	if !o.Requested {
		t.Fatalf("outcome %+v, want the robots.txt request made", o)
	}
	mu.Lock()
	end := ended
	mu.Unlock()
	if end.IsZero() {
		t.Fatal("the request was never cut")
	}
	if limit := deadline.Add(-time.Second); end.After(limit) {
		t.Errorf("request ended %s before the lease deadline, want at least 1s (cut-off 2s before)", deadline.Sub(end))
	}
	if reqEnd := time.UnixMilli(o.StartedAt + o.DurationMs); reqEnd.After(deadline.Add(-time.Second)) {
		t.Errorf("outcome says the request ended %s before the deadline", deadline.Sub(reqEnd))
	}
	t.Logf("request cut %s before the lease deadline, after starting %s into the task", deadline.Sub(end), fmt.Sprint(time.UnixMilli(o.StartedAt).Sub(issued)))
}

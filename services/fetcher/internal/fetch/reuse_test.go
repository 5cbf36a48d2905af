package fetch

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestBodyBufferReuse: a released body's buffer serves the next response, whose body is
// then exactly its own octets (no tail of the longer previous body), and a body larger
// than the pool keeps is not reused.
func TestBodyBufferReuse(t *testing.T) {
	pages := map[string][]byte{
		"/long":  bytes.Repeat([]byte("a"), 3000),
		"/short": []byte("bb"),
		"/huge":  bytes.Repeat([]byte("c"), maxPooledBody+1),
	}
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(pages[r.URL.Path])
	})
	cfg := testConfig("127.0.0.0/8")
	cfg.MaxBody = 2 * maxPooledBody
	c := New(cfg)
	defer c.CloseIdle()
	get := func(path string) *Response {
		t.Helper()
		resp, err := c.Get(context.Background(), s.URL+path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(resp.Body, pages[path]) {
			t.Fatalf("%s: body of %d octets, want %d", path, len(resp.Body), len(pages[path]))
		}
		return resp
	}

	// sync.Pool may drop an entry at any GC, so reuse is asserted over a few rounds: it
	// must happen at least once, and every body must be right whether or not it did.
	reused := false
	for range 20 {
		long := get("/long")
		first := &long.Body[0]
		long.Release()
		if long.Body != nil {
			t.Fatal("Release left Body set")
		}
		short := get("/short")
		if &short.Body[:1][0] == first {
			reused = true
		}
		short.Release()
	}
	if !reused {
		t.Error("a released body buffer was never reused by the next response")
	}

	huge := get("/huge")
	first, size := &huge.Body[0], cap(huge.Body)
	huge.Release()
	for range 20 {
		r := get("/short")
		if &r.Body[:1][0] == first {
			t.Fatalf("a %d-octet buffer was pooled (limit %d)", size, maxPooledBody)
		}
		r.Release()
	}
}

// TestBodyPresizeBounded: a Content-Length sizes the buffer up front, but only up to
// maxPresize: a server announcing a huge body it does not send cannot make the fetcher
// allocate it.
func TestBodyPresizeBounded(t *testing.T) {
	const announced = 12 << 20
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(announced))
		_, _ = w.Write(bytes.Repeat([]byte("x"), n)) // then the handler returns: the body is cut short
	})
	cfg := testConfig("127.0.0.0/8")
	cfg.MaxBody = 16 << 20
	c := New(cfg)
	defer c.CloseIdle()
	for _, n := range []int{9, 100 << 10} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		resp, err := c.Get(context.Background(), s.URL+"/?n="+strconv.Itoa(n))
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("n=%d: a body cut short read as complete (%d octets)", n, len(resp.Body))
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 2*maxPresize+uint64(n) {
			t.Errorf("n=%d: %d octets allocated for a body announced as %d; want at most about %d", n, got, announced, maxPresize)
		}
	}
}

// TestGetKeepsATighterDeadline: when the caller's deadline is sooner than Timeout, Get adds
// no context of its own (no timer per request), and the caller's deadline still ends the
// request.
func TestGetKeepsATighterDeadline(t *testing.T) {
	c := New(testConfig("127.0.0.0/8"))
	cases := []struct {
		name      string
		parent    time.Duration // 0: no deadline
		wantAlloc bool
	}{
		{"caller deadline sooner", time.Second, false},
		{"caller deadline later", time.Hour, true},
		{"no caller deadline", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.parent > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.parent)
				defer cancel()
			}
			allocs := testing.AllocsPerRun(50, func() {
				_, cancel := c.withTimeout(ctx)
				cancel()
			})
			if got := allocs > 0; got != tc.wantAlloc {
				t.Errorf("allocations per call = %v, want some: %v", allocs, tc.wantAlloc)
			}
			got, cancel := c.withTimeout(ctx)
			defer cancel()
			d, ok := got.Deadline()
			want := time.Now().Add(min(tc.parent, c.cfg.Timeout))
			if tc.parent == 0 {
				want = time.Now().Add(c.cfg.Timeout)
			}
			if !ok || d.After(want) || d.Before(want.Add(-time.Second)) {
				t.Errorf("deadline in %v, want about %v", time.Until(d), time.Until(want))
			}
		})
	}

	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers; the client must give up
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Get(ctx, s.URL+"/"); err == nil || !IsTimeout(err) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if took := time.Since(start); took > c.cfg.Timeout/2 {
		t.Errorf("the caller's 200ms deadline did not end the request (took %v)", took)
	}
}

// TestIdleConnsAcrossManyHosts: a crawl rotates through many hosts, asking each again only
// after the others; with an idle pool as large as the rotation, the second round reuses
// every connection instead of dialling again.
func TestIdleConnsAcrossManyHosts(t *testing.T) {
	const hosts = 600 // more than the transport's former fixed pool of 512
	var dials atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				dials.Add(1)
			}
		},
	}
	t.Cleanup(func() { _ = srv.Close() })
	urls := make([]string, hosts)
	for i := range urls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(l) }()
		urls[i] = "http://" + l.Addr().String() + "/"
	}
	cfg := testConfig("127.0.0.0/8")
	cfg.MaxIdleConns = hosts
	c := New(cfg)
	defer c.CloseIdle()
	for round := range 2 {
		before := dials.Load()
		for _, u := range urls {
			resp, err := c.Get(context.Background(), u)
			if err != nil {
				t.Fatal(err)
			}
			resp.Release()
		}
		if n := dials.Load() - before; round == 1 && n != 0 {
			t.Errorf("second round over %d hosts opened %d new connections, want 0", hosts, n)
		}
	}
}

package itest

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/inproc"
	devstack "github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/topology"
)

// startParser builds the parser binary and runs it against the stack until the test ends:
// the page travels from the fetcher to the parser as it does in a deployment.
func (st *stack) startParser(t *testing.T) {
	t.Helper()
	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "parser")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./services/parser")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build parser: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"TRAWL_NATS_URL="+st.nats.URL(),
		"TRAWL_REDIS_URL="+st.redis.URL(),
		"TRAWL_REDIS_PREFIX=itest",
		"TRAWL_HTTP_ADDR=127.0.0.1:0",
		"TRAWL_LEASE_TTL="+st.env["TRAWL_LEASE_TTL"],
		"TRAWL_CONTENT_DEDUP=false",
	)
	w := inproc.LogWriter(t)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(waitFor):
			_ = cmd.Process.Kill()
			t.Error("parser did not stop on SIGINT")
		}
	})
}

// TestBigPageCrawled: a 20 MB page, far above NATS's max_payload, is fetched whole, its
// body travels by reference through the CRAWL_BODIES object store, the parser reads it
// and follows a link in its last kilobyte, and the body is deleted once parsed.
func TestBigPageCrawled(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	const size = 20_000_000
	tail := `<a href="/tail-link">the end</a></body></html>`
	head := "<html><head><title>big</title></head><body>"
	var b strings.Builder
	b.WriteString(head)
	para := "<p>" + strings.Repeat("lorem ipsum dolor sit amet ", 4000) + "</p>\n"
	for b.Len()+len(para)+len(tail)+500 < size {
		b.WriteString(para)
	}
	b.WriteString(strings.Repeat(" ", size-b.Len()-len(tail)-500))
	b.WriteString(tail)
	b.WriteString(strings.Repeat(" ", size-b.Len()))
	body := b.String()
	if len(body) != size || strings.LastIndex(body, "/tail-link") < size-1024 {
		t.Fatalf("fixture: %d octets, link at %d", len(body), strings.LastIndex(body, "/tail-link"))
	}
	s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt), "/big": html(body)})
	// The default body cap (16 MiB) is below 20 MB; the ceiling is 64 MiB. 20 MB read under
	// the race detector on a busy machine takes seconds (4.6 s seen under make test), near
	// the harness's 5 s fetch timeout.
	st.start(st.config(map[string]string{"TRAWL_MAX_BODY": "24MiB", "TRAWL_FETCH_TIMEOUT": "30s"}), "a")
	// The harness's own reader of crawl.pages would count as a tap and keep the body; the
	// parser must be the stream's only consumer for the body to go at once.
	dctx, dcancel := context.WithTimeout(context.Background(), waitFor)
	err := st.js.DeleteConsumer(dctx, topology.StreamPages, st.pageCons.CachedInfo().Name)
	dcancel()
	if err != nil {
		t.Fatal(err)
	}
	st.startParser(t)
	st.warmRobots(s)

	tk := task(s.URL + "/big")
	st.publishTask(tk)
	o := st.outcome(tk.Lease)
	if o.Kind != crawlmsg.OutcomeFetched || o.Bytes != size {
		t.Fatalf("outcome %+v, want fetched with all %d octets", o, size)
	}
	var found bool
	deadline := time.Now().Add(waitFor)
	for !found {
		if time.Now().After(deadline) {
			t.Fatalf("no discovered batch with the tail link; got %v", st.discovered)
		}
		st.pollDiscovered()
		for _, r := range st.discovered {
			for _, u := range r.v.URLs {
				found = found || (r.v.Source == tk.URL && u.URL == s.URL+"/tail-link")
			}
		}
	}
	// Each wait has its own bound: one that spans the whole test would let a slow fetch
	// on a busy machine spend the time the body's deletion has.
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	deadline = time.Now().Add(waitFor)
	obs, err := st.js.ObjectStore(ctx, topology.BodiesBucket)
	if err != nil {
		t.Fatal(err)
	}
	// Gone means the object and its deletion marker: the bucket is empty again.
	for {
		_, err := obs.GetInfo(ctx, topology.PageID(tk.Lease))
		if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			t.Fatal(err)
		}
		status, serr := obs.Status(ctx)
		if serr != nil {
			t.Fatal(serr)
		}
		if err != nil && status.Size() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("body still stored (%v) or its marker kept (%d octets in the bucket) after its page was parsed", err, status.Size())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("20 MB page crawled; link at octet %d", strings.LastIndex(body, "/tail-link"))
}

package cli

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/trawlctl/internal/inspect"
	"github.com/trawl/trawl/trawlctl/internal/progress"
)

// TestRecrawlOperable: explain shows a URL's recrawl history and status the recrawl
// backlog, both read from CRAWL_RECRAWL; a one-shot crawl says recrawl is off.
func TestRecrawlOperable(t *testing.T) {
	s := startStack(t, 1)
	const u = "http://a.test/page"
	off := s.inv.run(t, "explain", "-json", u)
	var rep inspect.Report
	if err := json.Unmarshal([]byte(off.stdout), &rep); err != nil || rep.Recrawl != nil || !strings.HasPrefix(rep.RecrawlNote, "off") {
		t.Fatalf("one-shot crawl: %v %+v (%s)", err, rep.Recrawl, off.stderr)
	}

	ctx := testwait.Context(t)
	o := topology.DefaultOptions(1)
	o.Storage, o.Recrawl = jetstream.MemoryStorage, true
	if err := natsx.Ensure(ctx, s.js, o, topology.StageTimings{AckWait: 30 * time.Second, FetchAckWait: time.Minute, MaxDeliver: 5}, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(time.Hour)
	e := &crawlmsg.RecrawlEntry{URL: u, Depth: 2, State: crawlmsg.Recrawl{ETag: `"v7"`, Interval: 7_200_000,
		Fetches: 4, NotModified: 2, Changes: 1, LastFetch: time.Now().UnixMilli(), Due: due.UnixMilli()}}
	m, err := recrawl.Schedule(0, e, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := natsx.PublishBatch(ctx, s.js, []*nats.Msg{m}); err != nil {
		t.Fatal(err)
	}

	r := s.inv.run(t, "explain", "-json", u)
	rep = inspect.Report{}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, r.stderr)
	}
	if h := rep.Recrawl; h == nil || h.Where != "scheduled" || h.State.ETag != `"v7"` || h.State.Due != due.UnixMilli() {
		t.Fatalf("explain recrawl %+v (%s)", rep.Recrawl, rep.RecrawlNote)
	}
	text := s.inv.run(t, "explain", u).stdout
	if !strings.Contains(text, "recrawl    next fetch due") || !strings.Contains(text, "interval 2h0m0s") || !strings.Contains(text, `ETag "\"v7\""`) {
		t.Fatalf("explain text lacks the recrawl history:\n%s", text)
	}

	st := s.inv.run(t, "status", "-json", "-sample", "0")
	var snap progress.Snapshot
	if err := json.Unmarshal([]byte(st.stdout), &snap); err != nil {
		t.Fatalf("%v: %s", err, st.stderr)
	}
	if b := snap.Recrawl; b == nil || b.Scheduled != 1 || b.Due != 0 || b.MedianInterval != 2*time.Hour || b.NotModifiedShare != 0.5 {
		t.Fatalf("status recrawl %+v", snap.Recrawl)
	}
	if out := s.inv.run(t, "status", "-sample", "0").stdout; !strings.Contains(out, "recrawl    scheduled=1 due=0") || !strings.Contains(out, "304=50%") {
		t.Fatalf("status text lacks the recrawl backlog:\n%s", out)
	}
}

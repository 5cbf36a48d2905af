package itest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// publishByRef stores body as an object and publishes a page naming it, as the fetcher
// does for a body above its inline threshold. store=false names an object that is not
// there.
func (s *stack) publishByRef(url, body string, store bool) {
	s.t.Helper()
	s.publishByRefSized(url, body, store, int64(len(body)))
}

// publishByRefSized is publishByRef with the page saying the body has size octets.
func (s *stack) publishByRefSized(url, body string, store bool, size int64) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	name := topology.PageID(url)
	if store {
		obs, err := s.js.ObjectStore(ctx, topology.BodiesBucket)
		if err != nil {
			s.t.Fatal(err)
		}
		if _, err := obs.PutString(ctx, name, body); err != nil {
			s.t.Fatal(err)
		}
	}
	meta := htmlMeta(url, 0)
	meta.BodyRef = &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: name, Size: size}
	m, err := crawlmsg.PageMsg(topology.SubjectPages, &crawlmsg.Page{Meta: meta})
	if err != nil {
		s.t.Fatal(err)
	}
	m.Header.Set(nats.MsgIdHdr, name)
	s.publish(m)
}

func (s *stack) bodyStored(name string) bool {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	obs, err := s.js.ObjectStore(ctx, topology.BodiesBucket)
	if err != nil {
		s.t.Fatal(err)
	}
	_, err = obs.GetInfo(ctx, name)
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		s.t.Fatal(err)
	}
	return err == nil
}

// TestBodiesByReference: the parser reads a body sent by reference; it deletes it once
// parsed only when no tap could still ask for it; a body that is gone terminates its page,
// counted, instead of being retried.
func TestBodiesByReference(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"TRAWL_CONTENT_DEDUP": "false"})
	s.run()
	tail := strings.Repeat("<p>padding</p>", 1000) + `<a href="/found">found</a>`

	s.publishByRef("http://site.test/alone", "<title>Alone</title>"+tail, true)
	s.waitSettled()
	testwait.EventuallyState(t, waitFor, "the parsed body to be deleted", func() (bool, string) {
		return !s.bodyStored("page:http://site.test/alone"), "still stored"
	})

	// A durable tap on crawl.pages: the body must outlive the parser's ack.
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := s.js.CreateConsumer(ctx, topology.StreamPages, jetstream.ConsumerConfig{Durable: "archiver", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	s.publishByRef("http://site.test/tapped", "<title>Tapped</title>"+tail, true)
	s.waitSettled()
	if !s.bodyStored("page:http://site.test/tapped") {
		t.Error("a body was deleted while a tap had not read its page")
	}

	s.publishByRef("http://site.test/gone", "<title>Gone</title>", false)
	s.waitSettled()
	if n := s.metric(`trawl_parser_bodies_total{result="missing"}`); n != 1 {
		t.Errorf("missing bodies counted %v, want 1", n)
	}
	if n := s.metric(`trawl_parser_messages_terminated_total{reason="permanent"}`); n != 1 {
		t.Errorf("terminated %v, want the page whose body is gone", n)
	}
	// A body of another size than its page says is not that page's body, and no retry
	// reads another: the page is terminated, not redelivered for ever.
	resized := "<title>Resized</title>"
	s.publishByRefSized("http://site.test/resized", resized, true, int64(len(resized))+1)
	s.waitSettled()
	if n := s.metric(`trawl_parser_messages_terminated_total{reason="permanent"}`); n != 2 {
		t.Errorf("terminated %v, want also the page whose body has another size", n)
	}
	docs := map[string]crawlmsg.Document{}
	for _, d := range s.docs() {
		docs[d.doc.URL] = d.doc
	}
	for _, url := range []string{"http://site.test/alone", "http://site.test/tapped"} {
		d, ok := docs[url]
		if !ok || len(d.Links) != 1 || d.Links[0].URL != "http://site.test/found" {
			t.Errorf("%s: document %+v, want the link at the end of the referenced body", url, d)
		}
	}
	for _, url := range []string{"http://site.test/gone", "http://site.test/resized"} {
		if _, ok := docs[url]; ok {
			t.Errorf("%s: a document was published for a page without its body", url)
		}
	}
}

// A tap that holds one old page pins only the bodies whose pages may be among those it
// holds: a body stored later, whose page every consumer acked, is swept once its page's
// window has passed, while the store would otherwise fill behind the old page.
func TestSweepFreesBodiesBehindALaggingTap(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"TRAWL_CONTENT_DEDUP": "false", "TRAWL_LEASE_TTL": "2s"})
	s.run()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tap, err := s.js.CreateConsumer(ctx, topology.StreamPages, jetstream.ConsumerConfig{Durable: "lagging", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	tail := strings.Repeat("<p>padding</p>", 1000)
	old := time.Now()
	s.publishByRef("http://site.test/held", "<title>Held</title>"+tail, true)
	s.waitSettled()
	// The later page arrives clearly after the held one (more than the servers' clock
	// allowance), as pages do in a crawl where a tap is stuck on one.
	testwait.Eventually(t, 10*time.Second, "time to pass after the held page", func() bool { return time.Since(old) > 3*time.Second })
	s.publishByRef("http://site.test/acked", "<title>Acked</title>"+tail, true)
	s.waitSettled()
	// The tap reads both and acks only the later page.
	mb, err := tap.Fetch(2, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range mb.Messages() {
		n++
		if m.Headers().Get(nats.MsgIdHdr) == "page:http://site.test/acked" {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n != 2 {
		t.Fatalf("tap read %d pages, want 2", n)
	}

	testwait.EventuallyState(t, 90*time.Second, "the acked page's body swept", func() (bool, string) {
		n, err := s.svc.SweepBodies(ctx)
		if err != nil {
			return false, err.Error()
		}
		return !s.bodyStored("page:http://site.test/acked"), fmt.Sprintf("still stored (swept %d)", n)
	})
	if !s.bodyStored("page:http://site.test/held") {
		t.Error("a body was swept while a tap had not read its page")
	}
}

// TestBodyKeptUntilAcked: at the default level a page's ack waits out the stores' window,
// and a page handed back then (Redis went out of reach after it was parsed, and may come
// back without what the parser wrote) is parsed again from its body: the body goes only
// once its page is acked. Were it deleted when parsed, the second parse would find it
// gone and park the page as poison.
func TestBodyKeptUntilAcked(t *testing.T) {
	t.Parallel()
	// The window is 3 s at 1s; the ack wait must outlast it.
	s := newStack(t, map[string]string{"TRAWL_FSYNC": "1s", "TRAWL_ACK_WAIT": "10s", "TRAWL_CONTENT_DEDUP": "false"})
	s.run()
	const url = "http://site.test/held"
	name := topology.PageID(url)
	s.publishByRef(url, "<title>Held</title>"+strings.Repeat("<p>padding</p>", 1000), true)
	testwait.EventuallyState(t, waitFor, "the page's document", func() (bool, string) {
		n := len(s.docs())
		return n == 1, fmt.Sprintf("%d documents", n)
	})
	if err := s.rs.Stop(); err != nil {
		t.Fatal(err)
	}
	if !s.bodyStored(name) {
		t.Error("the body was deleted while its page's ack was still held back")
	}
	// Redis stays away past the window, so the ack's check finds it out of reach.
	testwait.EventuallyState(t, waitFor, "the page handed back", func() (bool, string) {
		n := s.metric(`trawl_settle_handed_back_total`)
		return n >= 1, fmt.Sprintf("%v handed back", n)
	})
	if err := s.rs.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.waitSettled()
	testwait.EventuallyState(t, waitFor, "the body deleted once its page was acked", func() (bool, string) {
		return !s.bodyStored(name), "still stored"
	})
	if n := s.metric(`trawl_parser_messages_terminated_total{reason="permanent"}`); n != 0 {
		t.Errorf("%v pages terminated: the page parsed again did not find its body", n)
	}
	// A delivery parsed while Redis was still coming back is handed back once more.
	if n := s.metric(`trawl_parser_bodies_total{result="read"}`); n < 2 {
		t.Errorf("bodies read %v times, want at least 2: parsed, handed back, parsed again", n)
	}
	if n := len(s.docs()); n != 1 {
		t.Errorf("%d documents, want the one (the second parse's has the same id)", n)
	}
}

// TestDeliveredAgainAfterItsBodyWent: a page whose earlier delivery was parsed and acked,
// and its body released, comes back when that ack was lost or came after the ack wait.
// Its body is gone because it was parsed: the page is acked with nothing to do, not
// parked as poison. The test plays the earlier delivery: it takes the page from the
// parser's consumer, never acks it, and removes its body.
func TestDeliveredAgainAfterItsBodyWent(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"TRAWL_CONTENT_DEDUP": "false"})
	const url = "http://site.test/again"
	name := topology.PageID(url)
	s.publishByRef(url, "<title>Again</title>", true)
	natsembed.Hold(t, s.js, topology.StreamPages, topology.ConsumerParser, 1, waitFor)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	// Gone as the parser's release leaves it: no object, no deletion marker.
	bodies, err := s.js.Stream(ctx, topology.BodiesStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := bodies.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if s.bodyStored(name) {
		t.Fatal("the body is still stored after the purge")
	}
	s.run()
	s.waitSettled()
	if n := s.metric(`trawl_parser_bodies_total{result="parsed_before"}`); n != 1 {
		t.Errorf("pages found parsed before counted %v, want 1", n)
	}
	if n := s.metric(`trawl_parser_messages_terminated_total{reason="permanent"}`); n != 0 {
		t.Errorf("%v pages terminated, want none: the page was parsed before", n)
	}
	if n := s.deadPages(); n != 0 {
		t.Errorf("%d pages parked as dead letters", n)
	}
	// Its ack passes the page to the release of bodies, which finds nothing to delete.
	if n := s.metric(`trawl_parser_bodies_total{result="deleted"}`); n != 0 {
		t.Errorf("bodies deleted %v, want none: the body was gone", n)
	}
}

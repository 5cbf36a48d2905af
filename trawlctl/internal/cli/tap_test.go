package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/slowlink"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

func (s *stack) publishDoc(t *testing.T, url string) {
	t.Helper()
	data, err := crawlmsg.Marshal(&crawlmsg.Document{URL: url, Title: "T " + url, Status: 200, Digest: "d"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.js.Publish(testwait.Context(t), topology.SubjectDocs, data); err != nil {
		t.Fatal(err)
	}
}

// docURLs decodes tap output lines as Documents.
func docURLs(t *testing.T, out string) []string {
	t.Helper()
	var urls []string
	for _, l := range lines(out) {
		var d crawlmsg.Document
		if err := crawlmsg.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		urls = append(urls, d.URL)
	}
	return urls
}

func TestTapDocs(t *testing.T) {
	s := startStack(t, 1)
	s.publishDoc(t, "http://old.test/")

	t.Run("from now sees only later documents", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		wait, _, stderr := s.inv.start(ctx, "tap", "-n", "2", "crawl.docs")
		testwait.Eventually(t, 10*time.Second, "the tap to be ready", func() bool { return strings.Contains(stderr.String(), "tapping crawl.docs") })
		s.publishDoc(t, "http://new1.test/")
		s.publishDoc(t, "http://new2.test/")
		r := wait()
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if got := strings.Join(docURLs(t, r.stdout), " "); got != "http://new1.test/ http://new2.test/" {
			t.Errorf("tapped %s", got)
		}
	})

	t.Run("from start sees earlier documents", func(t *testing.T) {
		r := s.inv.run(t, "tap", "-from-start", "-n", "3", "crawl.docs")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if got := strings.Join(docURLs(t, r.stdout), " "); got != "http://old.test/ http://new1.test/ http://new2.test/" {
			t.Errorf("tapped %s", got)
		}
	})

	t.Run("durable resumes where it stopped", func(t *testing.T) {
		steps := []struct {
			args    []string
			publish string
			want    string
		}{
			{[]string{"-from-start", "-n", "2"}, "", "http://old.test/ http://new1.test/"},
			// -from-start no longer matters: the consumer exists and keeps its place.
			{[]string{"-from-start", "-n", "1"}, "", "http://new2.test/"},
			{[]string{"-n", "1"}, "http://later.test/", "http://later.test/"},
		}
		for _, st := range steps {
			if st.publish != "" {
				s.publishDoc(t, st.publish)
			}
			args := append([]string{"tap", "-durable", "my-indexer"}, st.args...)
			r := s.inv.run(t, append(args, "crawl.docs")...)
			if r.code != 0 {
				t.Fatalf("%v: exit %d: %s", st.args, r.code, r.stderr)
			}
			if got := strings.Join(docURLs(t, r.stdout), " "); got != st.want {
				t.Errorf("%v: tapped %s, want %s", st.args, got, st.want)
			}
		}
		c, err := s.js.Consumer(testwait.Context(t), topology.StreamDocs, "my-indexer")
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(testwait.Context(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending != 0 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
			t.Errorf("consumer left pending %d, unacked %d, redelivered %d", info.NumPending, info.NumAckPending, info.NumRedelivered)
		}
	})

	t.Run("ctrl-c stops cleanly", func(t *testing.T) {
		for _, args := range [][]string{{"tap", "crawl.docs"}, {"tap", "-durable", "quiet", "crawl.docs"}} {
			ctx, cancel := context.WithCancel(context.Background())
			wait, _, stderr := s.inv.start(ctx, args...)
			testwait.Eventually(t, 10*time.Second, "the tap to be ready", func() bool { return strings.Contains(stderr.String(), "tapping crawl.docs") })
			cancel()
			done := make(chan result, 1)
			go func() { done <- wait() }()
			select {
			case r := <-done:
				if r.code != 0 || r.stdout != "" {
					t.Errorf("%v: exit %d, stdout %q after Ctrl-C", args, r.code, r.stdout)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("%v: did not stop after Ctrl-C", args)
			}
		}
	})
}

func TestTapPagesAndFetched(t *testing.T) {
	s := startStack(t, 2)
	ctx := testwait.Context(t)
	pm, err := crawlmsg.PageMsg(topology.SubjectPages, &crawlmsg.Page{
		Meta: crawlmsg.PageMeta{URL: "http://a.test/", Host: "a.test", Status: 200, ContentType: "text/html", FetchedAt: 1700000000000},
		Body: []byte("<p>hi</p>"),
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := crawlmsg.Marshal(&crawlmsg.Outcome{Shard: 1, Host: "b.test", URL: "http://b.test/", Lease: "1-7", Kind: crawlmsg.OutcomeFetched, Status: 404})
	if err != nil {
		t.Fatal(err)
	}
	if err := natsx.PublishBatch(ctx, s.js, []*nats.Msg{pm, natsx.NewMsg(topology.FetchedSubject(1), "", out)}); err != nil {
		t.Fatal(err)
	}
	// Then two pages in one message, as fetchers bundle them.
	var parts []*nats.Msg
	for _, u := range []string{"http://c.test/1", "http://c.test/2"} {
		m, err := crawlmsg.PageMsg(topology.SubjectPages, &crawlmsg.Page{Meta: crawlmsg.PageMeta{URL: u, Host: "c.test", Status: 200, ContentType: "text/html"}, Body: []byte("<p>c</p>")})
		if err != nil {
			t.Fatal(err)
		}
		m.Header.Set(nats.MsgIdHdr, "page:"+u)
		parts = append(parts, m)
	}
	bundle, err := crawlmsg.Bundle(topology.SubjectPages, parts)
	if err != nil {
		t.Fatal(err)
	}
	if err := natsx.PublishBatch(ctx, s.js, []*nats.Msg{bundle}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, line map[string]any)
	}{
		{"page metadata and body length", []string{"tap", "-from-start", "-n", "1", "crawl.pages"}, func(t *testing.T, l map[string]any) {
			if l["url"] != "http://a.test/" || l["body_len"] != float64(9) || l["status"] != float64(200) || l["content_type"] != "text/html" {
				t.Errorf("line %v", l)
			}
			if _, ok := l["body"]; ok {
				t.Errorf("body printed without -body")
			}
		}},
		{"page with body", []string{"tap", "-from-start", "-n", "1", "-body", "crawl.pages"}, func(t *testing.T, l map[string]any) {
			if l["body"] != "<p>hi</p>" {
				t.Errorf("body %v", l["body"])
			}
		}},
		{"fetch log by wildcard", []string{"tap", "-from-start", "-n", "1", "crawl.fetched.*"}, func(t *testing.T, l map[string]any) {
			if l["url"] != "http://b.test/" || l["kind"] != "fetched" || l["status"] != float64(404) {
				t.Errorf("line %v", l)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.inv.run(t, tt.args...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			ls := lines(r.stdout)
			if len(ls) != 1 {
				t.Fatalf("%d lines: %q", len(ls), r.stdout)
			}
			var l map[string]any
			if err := json.Unmarshal([]byte(ls[0]), &l); err != nil {
				t.Fatal(err)
			}
			tt.check(t, l)
		})
	}

	t.Run("a bundle's pages, a line each", func(t *testing.T) {
		r := s.inv.run(t, "tap", "-from-start", "-n", "3", "crawl.pages")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		urls := pageURLs(t, r.stdout)
		if want := []string{"http://a.test/", "http://c.test/1", "http://c.test/2"}; !slices.Equal(urls, want) {
			t.Errorf("printed %v, want %v", urls, want)
		}
	})
	t.Run("-n ends inside a bundle", func(t *testing.T) {
		r := s.inv.run(t, "tap", "-from-start", "-n", "2", "crawl.pages")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if ls := lines(r.stdout); len(ls) != 2 {
			t.Errorf("%d lines for -n 2: %q", len(ls), r.stdout)
		}
	})
	t.Run("a durable tap that stops inside a bundle prints it whole next time", func(t *testing.T) {
		var got [][]string
		for range 2 {
			r := s.inv.run(t, "tap", "-from-start", "-durable", "bundles", "-n", "2", "crawl.pages")
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			got = append(got, pageURLs(t, r.stdout))
		}
		want := [][]string{{"http://a.test/", "http://c.test/1"}, {"http://c.test/1", "http://c.test/2"}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("two runs printed %v, want %v", got, want)
		}
		if err := s.js.DeleteConsumer(ctx, topology.StreamPages, "bundles"); err != nil {
			t.Fatal(err)
		}
	})

	// The parser and the scheduler still have their messages: taps took nothing.
	for _, c := range []struct {
		stream, name string
		want         uint64
	}{{topology.StreamPages, topology.ConsumerParser, 2}, {topology.StreamFetched, topology.SchedulerFetchedConsumer(1), 1}} {
		cons, err := s.js.Consumer(ctx, c.stream, c.name)
		if err != nil {
			t.Fatal(err)
		}
		if info := cons.CachedInfo(); info.NumPending != c.want {
			t.Errorf("%s/%s pending %d after tapping, want %d", c.stream, c.name, info.NumPending, c.want)
		}
	}
}

func TestTapWorkQueueAndErrors(t *testing.T) {
	s := startStack(t, 1)
	ctx := testwait.Context(t)
	for _, u := range []string{"http://a.test/", "http://b.test/"} {
		data, err := crawlmsg.Marshal(&crawlmsg.DiscoveredBatch{URLs: []crawlmsg.Discovered{{URL: u, Via: crawlmsg.ViaSeed}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.js.Publish(ctx, topology.SubjectDiscovered, data); err != nil {
			t.Fatal(err)
		}
	}
	// One message taken and acked by "dedup" leaves a gap the peek must skip.
	dedup, err := s.js.Consumer(ctx, topology.StreamDiscovered, topology.ConsumerDedup)
	if err != nil {
		t.Fatal(err)
	}
	m, err := dedup.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	data, _ := crawlmsg.Marshal(&crawlmsg.DiscoveredBatch{URLs: []crawlmsg.Discovered{{URL: "http://c.test/"}}})
	if _, err := s.js.Publish(ctx, topology.SubjectDiscovered, data); err != nil {
		t.Fatal(err)
	}
	if _, err := s.js.Publish(ctx, "crawl.other", []byte("x")); err == nil {
		t.Fatal("crawl.other should have no stream")
	}

	t.Run("peek at a work queue", func(t *testing.T) {
		r := s.inv.run(t, "tap", "-from-start", "crawl.discovered")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		var got []string
		for _, l := range lines(r.stdout) {
			var b crawlmsg.DiscoveredBatch
			if err := crawlmsg.Unmarshal([]byte(l), &b); err != nil {
				t.Fatal(err)
			}
			got = append(got, b.URLs[0].URL)
		}
		if strings.Join(got, " ") != "http://b.test/ http://c.test/" {
			t.Errorf("peeked %v", got)
		}
		if !strings.Contains(r.stderr, "without consuming") {
			t.Errorf("stderr %q", r.stderr)
		}
		st, err := s.js.Stream(ctx, topology.StreamDiscovered)
		if err != nil {
			t.Fatal(err)
		}
		if n := st.CachedInfo().State.Msgs; n != 2 {
			t.Errorf("work queue holds %d messages after the peek, want 2", n)
		}
	})

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"work queue from now", []string{"tap", "crawl.discovered"}, "work-queue stream: crawl.discovered is on CRAWL_DISCOVERED"},
		{"work queue durable", []string{"tap", "-from-start", "-durable", "x", "crawl.fetch.0"}, "work-queue stream"},
		{"pipeline durable", []string{"tap", "-durable", "parser", "crawl.pages"}, `"parser" is a pipeline stage's consumer`},
		{"scheduler durable", []string{"tap", "-durable", "scheduler-0-outcomes", "crawl.fetched.0"}, "pipeline stage's consumer"},
		{"no stream", []string{"tap", "crawl.other"}, `no stream holds the subject "crawl.other"`},
		{"spans streams", []string{"tap", "crawl.>"}, "subject spans several streams"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectOneLine(t, s.inv.run(t, tt.args...), ExitFailure, tt.want)
		})
	}

	t.Run("durable with another filter", func(t *testing.T) {
		if _, err := s.js.CreateConsumer(ctx, topology.StreamFetched, jetstream.ConsumerConfig{
			Durable: "mine", FilterSubject: topology.FetchedSubject(0), AckPolicy: jetstream.AckExplicitPolicy,
		}); err != nil {
			t.Fatal(err)
		}
		expectOneLine(t, s.inv.run(t, "tap", "-durable", "mine", "crawl.fetched.*"), ExitFailure, `consumer mine on CRAWL_FETCHED exists with filter "crawl.fetched.0"`)
	})
}

// CRAWL_DOCS drops its oldest documents under its limits: a tap that was away is told how
// many it missed; a registered tap is marked for the scheduler's gate to wait for.
func TestTapDocsGapsAndRegistration(t *testing.T) {
	s := startStack(t, 1)
	ctx := testwait.Context(t)
	str, err := s.js.Stream(ctx, topology.StreamDocs)
	if err != nil {
		t.Fatal(err)
	}
	sc := str.CachedInfo().Config
	sc.MaxMsgs = 10
	if _, err := s.js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	s.publishDoc(t, "http://first.test/")

	t.Run("a resumed tap is told what it missed", func(t *testing.T) {
		if r := s.inv.run(t, "tap", "-durable", "late", "-from-start", "-n", "1", "crawl.docs"); r.code != 0 || strings.Contains(r.stderr, "missed") {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		// Sequences 2..26; the stream keeps the last 10, 17..26.
		for i := range 25 {
			s.publishDoc(t, fmt.Sprintf("http://p%d.test/", i))
		}
		r := s.inv.run(t, "tap", "-durable", "late", "-n", "2", "crawl.docs")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if got := strings.Join(docURLs(t, r.stdout), " "); got != "http://p15.test/ http://p16.test/" {
			t.Errorf("tapped %s", got)
		}
		if !strings.Contains(r.stderr, "missed 15 messages (stream sequences 2..16)") {
			t.Errorf("stderr %q: want a warning that 15 documents were missed", r.stderr)
		}
	})

	t.Run("register", func(t *testing.T) {
		for _, name := range []string{"fresh", "late"} {
			r := s.inv.run(t, "tap", "-durable", name, "-register", "-from-start", "-n", "1", "crawl.docs")
			if r.code != 0 || !strings.Contains(r.stderr, "registered") {
				t.Fatalf("%s: exit %d: %s", name, r.code, r.stderr)
			}
			c, err := s.js.Consumer(ctx, topology.StreamDocs, name)
			if err != nil {
				t.Fatal(err)
			}
			if !topology.Registered(c.CachedInfo().Config) {
				t.Errorf("%s: consumer metadata %v, want registered", name, c.CachedInfo().Config.Metadata)
			}
		}
		for _, args := range [][]string{{"-register", "crawl.docs"}, {"-durable", "x", "-register", "crawl.fetched.0"}} {
			if r := s.inv.run(t, append([]string{"tap"}, args...)...); r.code == 0 || !strings.Contains(r.stderr, "-register needs -durable") {
				t.Errorf("%v: exit %d, stderr %q: want refused", args, r.code, r.stderr)
			}
		}
	})
}

// A durable tap's pull ends when the server ends it. Over a link that holds what the client
// sends for 700 ms, a pull the client gave up on at a deadline of its own (5 s, the server
// told 4.5 s) was still open at the server, which delivered into it: those documents came
// back only after the tap's 30 s AckWait. Documents published one every 150 ms must all be
// printed, in order, within seconds of the last.
func TestTapOnASlowLink(t *testing.T) {
	s := startStack(t, 1)
	u, err := url.Parse(s.nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	inv := invocation{env: maps.Clone(s.inv.env)}
	inv.env["TRAWL_NATS_URL"] = "nats://" + slowlink.Start(t, u.Host, 700*time.Millisecond)
	const docs = 40
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wait, stdout, stderr := inv.start(ctx, "tap", "-durable", "slow", "-n", fmt.Sprint(docs), "crawl.docs")
	testwait.Eventually(t, 20*time.Second, "the tap to be ready", func() bool { return strings.Contains(stderr.String(), "tapping crawl.docs") })
	var want []string
	for i := range docs {
		u := fmt.Sprintf("http://slow.test/%d", i)
		want = append(want, u)
		s.publishDoc(t, u)
		time.Sleep(150 * time.Millisecond) // the publishing pace, the thing tested against
	}
	testwait.EventuallyState(t, 8*time.Second, "every document printed", func() (bool, string) {
		n := len(lines(stdout.String()))
		return n == docs, fmt.Sprintf("%d of %d printed", n, docs)
	})
	r := wait()
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if got := strings.Join(docURLs(t, r.stdout), " "); got != strings.Join(want, " ") {
		t.Errorf("tapped %s", got)
	}
}

// pageURLs is the url of each line a tap of crawl.pages printed.
func pageURLs(t *testing.T, stdout string) []string {
	t.Helper()
	var urls []string
	for _, l := range lines(stdout) {
		var p map[string]any
		if err := json.Unmarshal([]byte(l), &p); err != nil {
			t.Fatal(err)
		}
		urls = append(urls, fmt.Sprint(p["url"]))
	}
	return urls
}

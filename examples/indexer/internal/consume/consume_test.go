package consume_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/slowlink"
	"github.com/trawl/trawl/examples/indexer/internal/cmd"
	"github.com/trawl/trawl/examples/indexer/internal/consume"
	"github.com/trawl/trawl/examples/indexer/internal/index"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// crawl starts NATS with the crawl's streams, as the services declare them.
func crawl(t *testing.T) (*natsembed.Server, jetstream.JetStream) {
	t.Helper()
	srv := natsembed.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, js, err := natsx.Connect(ctx, srv.URL(), "test", quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	tm := topology.StageTimings{AckWait: 30 * time.Second, FetchAckWait: time.Minute, MaxDeliver: 5}
	if err := natsx.Ensure(ctx, js, topology.DefaultOptions(1), tm, quiet); err != nil {
		t.Fatal(err)
	}
	return srv, js
}

func publish(t *testing.T, js jetstream.JetStream, docs ...crawlmsg.Document) {
	t.Helper()
	for _, d := range docs {
		data, err := crawlmsg.Marshal(&d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(context.Background(), topology.SubjectDocs, data); err != nil {
			t.Fatal(err)
		}
	}
}

// runUntil runs the consumer until done(stats) holds, then stops it like Ctrl-C does.
func runUntil(t *testing.T, js jetstream.JetStream, store *index.Store, done func(consume.Stats) bool) consume.Stats {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var last consume.Stats
	result := make(chan error, 1)
	var st consume.Stats
	go func() {
		var err error
		st, err = consume.Run(ctx, js, store, consume.Options{Batch: 2, Log: quiet, OnBatch: func(s consume.Stats) {
			mu.Lock()
			last = s
			mu.Unlock()
		}})
		result <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		ok := done(last)
		mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer did not get there: %+v", last)
		}
		select {
		case err := <-result:
			// Run ended before the condition: say why instead of waiting out the deadline.
			t.Fatalf("consumer stopped early at %+v: %v", last, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-result:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("consumer did not stop")
	}
	return st
}

func TestIndexAndResume(t *testing.T) {
	_, js := crawl(t)
	ctx := context.Background()
	store, err := index.Open(ctx, filepath.Join(t.TempDir(), "idx.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	publish(t, js,
		crawlmsg.Document{URL: "http://a.test/", Title: "Rose gardening", Text: "prune in spring", FetchedAt: 1},
		crawlmsg.Document{URL: "http://b.test/", Title: "Bread", Text: "flour water salt", FetchedAt: 1},
		crawlmsg.Document{URL: "http://c.test/", Title: "Hidden", Text: "spring", NoIndex: true, FetchedAt: 1},
	)
	if _, err := js.Publish(ctx, topology.SubjectDocs, []byte(`{"v":99,"url":"http://future.test/"}`)); err != nil {
		t.Fatal(err)
	}

	st := runUntil(t, js, store, func(s consume.Stats) bool { return s.Messages == 4 })
	if st.Upserted != 2 || st.Removed != 1 || st.Malformed != 1 {
		t.Errorf("first run %+v", st)
	}
	if n, _ := store.Count(ctx); n != 2 {
		t.Errorf("%d documents indexed, want 2", n)
	}

	// Two more while the indexer is down; the restart takes only those.
	publish(t, js,
		crawlmsg.Document{URL: "http://d.test/", Title: "Sourdough", Text: "flour and a starter", FetchedAt: 2},
		crawlmsg.Document{URL: "http://a.test/", Title: "Rose gardening", Text: "prune in early spring", FetchedAt: 2},
	)
	st = runUntil(t, js, store, func(s consume.Stats) bool { return s.Messages >= 2 })
	if st.Messages != 2 || st.Upserted != 2 || st.Malformed != 0 {
		t.Errorf("restart re-read old documents: %+v", st)
	}
	cons, err := js.Consumer(ctx, topology.StreamDocs, "indexer")
	if err != nil {
		t.Fatal(err)
	}
	info := cons.CachedInfo()
	if info.NumPending != 0 || info.NumAckPending != 0 || info.NumRedelivered != 0 || info.Delivered.Consumer != 6 {
		t.Errorf("consumer: pending %d, unacked %d, redelivered %d, delivered %d", info.NumPending, info.NumAckPending, info.NumRedelivered, info.Delivered.Consumer)
	}

	tests := []struct {
		query string
		want  []string
	}{
		{"early spring", []string{"http://a.test/"}}, // the newer fetch replaced the text
		{"flour", []string{"http://b.test/", "http://d.test/"}},
		{"sourdough", []string{"http://d.test/"}},
		{"hidden", nil}, // noindex
	}
	for _, tt := range tests {
		hits, err := store.Search(ctx, index.Query(tt.query), 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range hits {
			got = append(got, h.URL)
		}
		if strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("search %q: %v, want %v", tt.query, got, tt.want)
		}
	}
}

func TestCommandLine(t *testing.T) {
	srv, js := crawl(t)
	db := filepath.Join(t.TempDir(), "cli.db")
	publish(t, js,
		crawlmsg.Document{URL: "http://go.test/", Title: "The Go language", Text: "goroutines and channels", FetchedAt: 1},
		crawlmsg.Document{URL: "http://c.test/", Title: "C", Text: "pointers; channels are not built in", FetchedAt: 1},
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr strings.Builder
	go func() {
		done <- cmd.Run(ctx, []string{"-nats", srv.URL(), "-db", db, "-durable", "cli"}, io.Discard, &stderr)
	}()

	search := func(args ...string) (int, string) {
		var out, errOut strings.Builder
		code := cmd.Run(context.Background(), append([]string{"search", "-db", db}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	// The indexer's stderr is read only once it has returned: its goroutine writes it.
	stopped := func() string {
		cancel()
		select {
		case code := <-done:
			return fmt.Sprintf("the indexer exited %d: %s", code, stderr.String())
		case <-time.After(15 * time.Second):
			return "the indexer did not stop"
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, out := search("pointers")
		if strings.Contains(out, "http://c.test/") {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("the indexer exited %d before indexing: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("documents not indexed within 30s; the last search said %q; %s", out, stopped())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("indexer exit %d: %s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("indexer did not stop")
	}

	tests := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"channels"}, 0, "http://go.test/\tThe Go language\nhttp://c.test/\tC\n"},
		{[]string{"-n", "1", "channels"}, 0, "http://go.test/\tThe Go language\n"},
		{[]string{"-raw", "go*"}, 0, "http://go.test/\tThe Go language\n"},
		{[]string{"nothing-matches"}, 0, ""},
		{nil, 2, "usage"},
	}
	for _, tt := range tests {
		code, out := search(tt.args...)
		if code != tt.code || !strings.Contains(out, tt.out) || (tt.code == 0 && out != tt.out) {
			t.Errorf("search %v: exit %d, output %q; want %d, %q", tt.args, code, out, tt.code, tt.out)
		}
	}
	var out, errOut strings.Builder
	if code := cmd.Run(context.Background(), []string{"search", "-db", filepath.Join(t.TempDir(), "none.db"), "x"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "run the indexer first") {
		t.Errorf("search without an index: exit %d, %q", code, errOut.String())
	}
}

// The indexer registers its consumer, so the crawl waits for it; what the stream dropped
// anyway while it was stopped is counted.
func TestRegisteredAndGapsCounted(t *testing.T) {
	_, js := crawl(t)
	ctx := context.Background()
	str, err := js.Stream(ctx, topology.StreamDocs)
	if err != nil {
		t.Fatal(err)
	}
	sc := str.CachedInfo().Config
	sc.MaxMsgs = 5
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	store, err := index.Open(ctx, filepath.Join(t.TempDir(), "idx.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	doc := func(i int) crawlmsg.Document {
		return crawlmsg.Document{URL: fmt.Sprintf("http://%d.test/", i), Title: "t", FetchedAt: 1}
	}
	publish(t, js, doc(0))
	if st := runUntil(t, js, store, func(s consume.Stats) bool { return s.Messages == 1 }); st.Missed != 0 {
		t.Fatalf("first run %+v", st)
	}
	cons, err := js.Consumer(ctx, topology.StreamDocs, "indexer")
	if err != nil {
		t.Fatal(err)
	}
	if !topology.Registered(cons.CachedInfo().Config) {
		t.Fatalf("indexer consumer metadata %v: not registered", cons.CachedInfo().Config.Metadata)
	}

	// Sequences 2..13 while the indexer is stopped; the stream keeps 9..13.
	for i := 1; i <= 12; i++ {
		publish(t, js, doc(i))
	}
	st := runUntil(t, js, store, func(s consume.Stats) bool { return s.Messages >= 5 })
	if st.Messages != 5 || st.Missed != 7 {
		t.Errorf("restart %+v: want 5 documents read and 7 missed", st)
	}
}

// The indexer's pull ends when the server ends it. Over a link that holds what the client
// sends for 700 ms, a pull the client gave up on at a deadline of its own (5 s, the server
// told 4.5 s) was still open at the server, which delivered into it: those documents came
// back only after the consumer's one-minute AckWait, while the crawl held for this
// registered indexer. Documents published one every 150 ms must all be indexed within
// seconds of the last.
func TestIndexOnASlowLink(t *testing.T) {
	srv, js := crawl(t)
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc, slow, err := natsx.Connect(ctx, "nats://"+slowlink.Start(t, u.Host, 700*time.Millisecond), "indexer", quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	store, err := index.Open(ctx, filepath.Join(t.TempDir(), "idx.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	var (
		mu   sync.Mutex
		last consume.Stats
	)
	rctx, stop := context.WithCancel(ctx)
	result := make(chan error, 1)
	go func() {
		_, err := consume.Run(rctx, slow, store, consume.Options{Log: quiet, OnBatch: func(s consume.Stats) {
			mu.Lock()
			last = s
			mu.Unlock()
		}})
		result <- err
	}()
	const docs = 40
	for i := range docs {
		publish(t, js, crawlmsg.Document{URL: fmt.Sprintf("http://slow.test/%d", i), Title: "slow", Text: "link", FetchedAt: 1})
		time.Sleep(150 * time.Millisecond) // the publishing pace, the thing tested against
	}
	testwait.EventuallyState(t, 8*time.Second, "every document indexed", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return last.Upserted == docs, fmt.Sprintf("%+v", last)
	})
	stop()
	if err := <-result; err != nil {
		t.Fatal(err)
	}
	if n, err := store.Count(ctx); err != nil || n != docs {
		t.Errorf("%d documents in the index (%v), want %d", n, err, docs)
	}
}

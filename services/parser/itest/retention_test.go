package itest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// TestPagesKeptUntilParsed: with the parser down, pages published past the pages stream's
// limits (a short age, a small byte cap) are all kept — the stream refuses what does not
// fit instead of dropping the oldest — and every page it accepted is parsed once the
// parser is back.
func TestPagesKeptUntilParsed(t *testing.T) {
	t.Parallel()
	ns := natsembed.StartT(t)
	rs := redisproc.StartT(t, redisproc.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, js := connectJS(t, ns)
	common := envconfig.LoadCommon(envconfig.FromMap(map[string]string{"TRAWL_ACK_WAIT": "1s", "TRAWL_FSYNC": "always"}), "")
	opts := common.Topology()
	const capBytes = 64 << 10
	opts.TapMaxAge = time.Second
	opts.DuplicateWindow = time.Second // at most the age limit
	opts.PagesMaxBytes = capBytes
	if err := natsx.Ensure(ctx, js, opts, common.Timings(), slog.Default()); err != nil {
		t.Fatal(err)
	}

	// About 3× the byte cap (100 pages of 2 KB), as a fetcher would publish it while the
	// parser is down.
	body := "<title>p</title><p>" + strings.Repeat("word ", 400) + "</p>"
	var accepted []string
	refused := 0
	for i := range 100 {
		url := fmt.Sprintf("http://site.test/p%d", i)
		m, err := crawlmsg.PageMsg(topology.SubjectPages, &crawlmsg.Page{Meta: htmlMeta(url, 0), Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		m.Header.Set(nats.MsgIdHdr, topology.PageID(url))
		_, err = js.PublishMsg(ctx, m)
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			accepted = append(accepted, url)
		case errors.As(err, &apiErr):
			refused++ // full: the fetcher would retry it until its lease deadline
		default:
			t.Fatal(err)
		}
	}
	t.Logf("%d pages accepted, %d refused by a full stream", len(accepted), refused)
	// The parser stays down longer than the stream's age limit: an outage, not a race.
	time.Sleep(2 * opts.TapMaxAge)
	st, err := js.Stream(ctx, topology.StreamPages)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != uint64(len(accepted)) {
		t.Fatalf("pages stream holds %d of the %d pages it accepted: unparsed pages were dropped", got, len(accepted))
	}

	s := newStackOn(t, ns, rs, map[string]string{"TRAWL_CONTENT_DEDUP": "false"})
	s.run()
	s.waitSettled()
	parsed := map[string]bool{}
	for _, d := range s.docs() {
		parsed[d.doc.URL] = true
	}
	for _, url := range accepted {
		if !parsed[url] {
			t.Errorf("page %s was accepted but never parsed", url)
		}
	}
	if len(parsed) != len(accepted) {
		t.Errorf("%d documents for %d accepted pages", len(parsed), len(accepted))
	}
}

// TestPagesStreamMigratesInPlace: a pages stream made by an earlier release (kept by
// limits, 72 h, oldest dropped) is changed to interest retention by the services' start-up
// declaration, keeping the pages it holds for the parser.
func TestPagesStreamMigratesInPlace(t *testing.T) {
	t.Parallel()
	ns := natsembed.StartT(t)
	rs := redisproc.StartT(t, redisproc.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, js := connectJS(t, ns)
	old := jetstream.StreamConfig{
		Name: topology.StreamPages, Subjects: []string{topology.SubjectPages}, Retention: jetstream.LimitsPolicy,
		Storage: jetstream.FileStorage, MaxAge: 72 * time.Hour, MaxBytes: 8 << 30, MaxMsgSize: 8 << 20, Discard: jetstream.DiscardOld,
		Duplicates: 10 * time.Minute,
	}
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, topology.StreamPages, jetstream.ConsumerConfig{Durable: topology.ConsumerParser, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: topology.SubjectPages}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		m, err := crawlmsg.PageMsg(topology.SubjectPages, &crawlmsg.Page{Meta: htmlMeta(fmt.Sprintf("http://site.test/old%d", i), 0), Body: []byte("<title>old</title>")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	// The old parser had parsed the first page already: a limits stream kept it anyway.
	cons, err := js.Consumer(ctx, topology.StreamPages, topology.ConsumerParser)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}

	s := newStackOn(t, ns, rs, map[string]string{"TRAWL_CONTENT_DEDUP": "false"})
	st, err := js.Stream(ctx, topology.StreamPages)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.Retention != jetstream.InterestPolicy || cfg.MaxAge != 0 || cfg.Discard != jetstream.DiscardNew {
		t.Fatalf("pages stream after start-up: retention %v, max age %v, discard %v; want interest, none, new", cfg.Retention, cfg.MaxAge, cfg.Discard)
	}
	// The change drops what every consumer has acked, at once: no parsed page lingers
	// without an age limit to remove it.
	if n := st.CachedInfo().State.Msgs; n != 2 {
		t.Errorf("pages stream holds %d pages after the migration, want the 2 not yet parsed", n)
	}
	s.run()
	s.waitSettled()
	if n := len(s.docs()); n != 2 {
		t.Errorf("%d documents from the 2 unparsed pages kept across the migration", n)
	}
	testwait.EventuallyState(t, waitFor, "parsed pages to leave the interest stream", func() (bool, string) {
		st, err := js.Stream(ctx, topology.StreamPages)
		if err != nil {
			return false, err.Error()
		}
		n := st.CachedInfo().State.Msgs
		return n == 0, fmt.Sprintf("%d messages kept", n)
	})
}

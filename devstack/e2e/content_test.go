package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/topology"
)

// readDocs returns every document in crawl.docs by URL, read with an ordered consumer so
// the crawl's own consumers are untouched.
func readDocs(t *testing.T, js jetstream.JetStream) map[string]crawlmsg.Document {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, topology.StreamDocs)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]crawlmsg.Document{}
	for n := uint64(0); n < info.State.Msgs; {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			var d crawlmsg.Document
			if err := crawlmsg.Unmarshal(m.Data(), &d); err != nil {
				t.Fatalf("crawl.docs holds a bad document: %v", err)
			}
			docs[d.URL] = d
			got++
		}
		if got == 0 {
			t.Fatalf("read %d of %d documents", n, info.State.Msgs)
		}
		n += uint64(got)
	}
	return docs
}

// The synthetic web's copies of a page, exact and near (one word changed), are flagged in
// crawl.docs with the URL of the page they duplicate: in each group of identical pages
// exactly one — whichever the crawl parsed first — stands as the original.
func TestCrawlFlagsDuplicateContent(t *testing.T) {
	t.Parallel()
	env := testEnv()
	r := crawl(t, testWeb(), env, stack.Options{}, nil)
	checkInvariants(t, r, env, 0)
	docs := readDocs(t, r.stack.JetStream())

	copies := r.web.Duplicates()
	if len(copies) == 0 || len(r.web.NearDuplicates()) == 0 {
		t.Fatal("the synthetic web has no duplicate pages to check")
	}
	groups := map[string][]string{}
	for c, orig := range copies {
		if len(groups[orig]) == 0 {
			groups[orig] = append(groups[orig], orig)
		}
		groups[orig] = append(groups[orig], c)
	}
	near := 0
	for orig, members := range groups {
		inGroup := map[string]bool{}
		for _, u := range members {
			inGroup[u] = true
		}
		standing := 0
		for _, u := range members {
			d, ok := docs[u]
			if !ok {
				t.Errorf("no document for %s", u)
				continue
			}
			switch {
			case d.DuplicateOf != "":
				if !inGroup[d.DuplicateOf] {
					t.Errorf("%s flagged as a copy of %s, outside its group (%s)", u, d.DuplicateOf, orig)
				}
			case d.NearDuplicateOf != "":
				near++
				if !inGroup[d.NearDuplicateOf] || d.Distance > 3 {
					t.Errorf("%s flagged as near %s at distance %d, outside its group (%s)", u, d.NearDuplicateOf, d.Distance, orig)
				}
			default:
				standing++
			}
		}
		if standing != 1 {
			t.Errorf("group of %s: %d pages stand as originals, want exactly 1", orig, standing)
		}
	}
	if near == 0 {
		t.Error("no page was flagged as a near duplicate")
	}
	// Ordinary pages are not flagged.
	flagged := 0
	for u, d := range docs {
		if (d.DuplicateOf != "" || d.NearDuplicateOf != "") && copies[u] == "" {
			if _, isOrig := groups[u]; !isOrig {
				flagged++
				t.Errorf("%s flagged as a duplicate of %s%s", u, d.DuplicateOf, d.NearDuplicateOf)
			}
		}
	}
}

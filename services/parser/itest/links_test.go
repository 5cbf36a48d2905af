package itest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
)

// The links of a batch of pages leave in one crawl.discovered message, one link group per
// page with the page as its source, so the discovered and frontier stages pay per batch,
// not per page; and no page's links are lost or doubled on the way.
func TestLinksOfABatchInOneMessage(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	const pages = 12
	// Published before the parser starts, so that its first pull takes them all at once.
	for i := range pages {
		body := fmt.Sprintf(`<html><body><a href="/a%d">a</a> <a href="/b%d">b</a></body></html>`, i, i)
		s.publishPage(htmlMeta(fmt.Sprintf("http://p%d.test/", i), 1), body)
	}
	s.run()
	s.waitSettled()

	msgs := s.takeDiscovered()
	if len(msgs) == 0 || len(msgs) >= pages {
		t.Fatalf("%d discovered messages for %d pages, want fewer messages than pages", len(msgs), pages)
	}
	got := map[string][]string{}
	for _, m := range msgs {
		for _, g := range m.batch.LinkGroups() {
			if _, dup := got[g.Source]; dup {
				t.Errorf("%s: links published twice", g.Source)
			}
			for _, u := range g.URLs {
				got[g.Source] = append(got[g.Source], u.URL)
				if u.Depth != 2 || u.Via != crawlmsg.ViaLink {
					t.Errorf("%s: depth %d via %q", u.URL, u.Depth, u.Via)
				}
			}
		}
	}
	for i := range pages {
		src := fmt.Sprintf("http://p%d.test/", i)
		want := []string{fmt.Sprintf("http://p%d.test/a%d", i, i), fmt.Sprintf("http://p%d.test/b%d", i, i)}
		if !slices.Equal(got[src], want) {
			t.Errorf("%s: links %v, want %v", src, got[src], want)
		}
	}
	if len(got) != pages {
		t.Errorf("link groups of %d pages, want %d", len(got), pages)
	}
}

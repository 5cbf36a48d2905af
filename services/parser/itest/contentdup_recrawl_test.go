package itest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/testwait"
)

// In adaptive recrawl a URL whose text changes on every fetch keeps one exact entry in the
// content index, not one per text it ever had: its previous text's key goes when the text
// changes, so another page with that old text is no longer reported a copy of it.
func TestChangedRefetchesKeepOneExactKey(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"TRAWL_RECRAWL": "adaptive", "TRAWL_RECRAWL_MIN": "1s",
		"TRAWL_RECRAWL_DEFAULT": "1h", "TRAWL_RECRAWL_MAX": "48h", "TRAWL_CONTENT_PARTS": "4"})
	s.run()
	ctx := testwait.Context(t)
	const url, versions = "http://site.test/changing", 12
	text := func(i int) string {
		return strings.Repeat(fmt.Sprintf("alpha%d beta%d gamma%d delta%d epsilon%d ", i, i, i, i, i), 20)
	}
	html := func(i int) string { return "<html><body><p>" + text(i) + "</p></body></html>" }
	var prev *crawlmsg.Recrawl
	for i := range versions {
		m := htmlMeta(url, 1)
		m.FetchedAt = time.Now().UnixMilli()
		m.Recrawl = prev
		s.publishPage(m, html(i))
		s.waitSettled()
		h, err := recrawl.Lookup(ctx, s.js, 0, url)
		if err != nil {
			t.Fatal(err)
		}
		if h.Where != "scheduled" || h.State.Digest == "" {
			t.Fatalf("version %d: schedule %+v, want one with the text's digest", i, h)
		}
		st := h.State
		prev = &st
	}
	keys, err := s.rdb.Keys(ctx, "*exact:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	entries := int64(0)
	for _, k := range keys {
		n, err := s.rdb.HLen(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		entries += n
	}
	if entries != 1 {
		t.Errorf("%d exact entries after %d changed fetches of one URL, want 1: %v", entries, versions, keys)
	}

	// Another URL with the first text is not a copy of a URL that no longer has it; one
	// with the current text is.
	s.publishPage(htmlMeta("http://site.test/old-copy", 1), html(0))
	s.publishPage(htmlMeta("http://site.test/current-copy", 1), html(versions-1))
	s.waitSettled()
	dups := map[string]string{}
	for _, d := range s.docs() {
		dups[d.doc.URL] = d.doc.DuplicateOf
	}
	if got := dups["http://site.test/old-copy"]; got != "" {
		t.Errorf("a page with the URL's former text is reported an exact copy of %s", got)
	}
	if got := dups["http://site.test/current-copy"]; got != url {
		t.Errorf("a page with the URL's current text: duplicate of %q, want %s", got, url)
	}
}

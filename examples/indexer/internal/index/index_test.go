package index

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
)

func TestStore(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "i.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Apply(ctx, []crawlmsg.Document{
		{URL: "http://a.test/", Title: "Gardening tips", Description: "roses", Text: "water the plants", FetchedAt: 10},
		{URL: "http://b.test/", Title: "Cooking", Text: "gardening is mentioned once in the text", FetchedAt: 10},
		{URL: "http://c.test/", Title: "Rust and Go", Text: "compilers", FetchedAt: 10},
		{URL: "http://d.test/", Title: "Secret", Text: "gardening", FetchedAt: 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A newer fetch replaces a page, an older replay does not, noindex removes one.
	c, err := s.Apply(ctx, []crawlmsg.Document{
		{URL: "http://c.test/", Title: "Go compilers", Text: "gc and gccgo", FetchedAt: 20},
		{URL: "http://c.test/", Title: "stale", Text: "stale", FetchedAt: 5},
		{URL: "http://d.test/", NoIndex: true, FetchedAt: 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Upserted != 2 || c.Removed != 1 {
		t.Errorf("counts %+v", c)
	}
	tests := []struct {
		query string
		want  []string
	}{
		{"gardening", []string{"http://a.test/", "http://b.test/"}}, // title beats text
		{"GCCGO", []string{"http://c.test/"}},
		{"rust", nil},
		{"stale", nil},
		{"water plants", []string{"http://a.test/"}},
		{`water "or" AND(`, nil}, // punctuation is quoted, never FTS5 syntax
		{"secret", nil},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			hits, err := s.Search(ctx, Query(tt.query), 10)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range hits {
				got = append(got, h.URL)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
	if n, err := s.Count(ctx); err != nil || n != 3 {
		t.Errorf("count %d, %v", n, err)
	}
}

// An unchanged event (a recrawl answered 304) refreshes the indexed copy's fetch time and
// keeps its content.
func TestStoreUnchanged(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "i.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Apply(ctx, []crawlmsg.Document{{URL: "http://a.test/", Title: "Gardening", Text: "roses", FetchedAt: 10}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, []crawlmsg.Document{{URL: "http://a.test/", Status: 304, Unchanged: true, FetchedAt: 20}}); err != nil {
		t.Fatal(err)
	}
	hits, err := s.Search(ctx, Query("roses"), 10)
	if err != nil || len(hits) != 1 || hits[0].Title != "Gardening" {
		t.Fatalf("after an unchanged event: %+v, %v; want the page as indexed", hits, err)
	}
	var at int64
	if err := s.db.QueryRowContext(ctx, `SELECT fetched_at FROM docs WHERE url = ?`, "http://a.test/").Scan(&at); err != nil || at != 20 {
		t.Fatalf("fetched_at %d, %v; want 20", at, err)
	}
}

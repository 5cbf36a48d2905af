package bloomhash

import "testing"

// The keys are spelled out as dedup has always written them: a layout change would leave
// a deployment's filter (and its memos) behind, every URL new again, so it must fail here.
func TestKeyLayout(t *testing.T) {
	for _, tc := range []struct {
		name, got, want string
	}{
		{"meta of one part", MetaKey("crawl7", Tag(0, 1)), "crawl7:{dedup}:bloom:meta"},
		{"bitmap of one part", BitmapKey("crawl7", Tag(0, 1), 2, 17), "crawl7:{dedup}:bloom:2:17"},
		{"bitmap in the part's keyspace", BitmapKeyIn(PartKeyspace("crawl7", 0, 1), 2, 17), "crawl7:{dedup}:bloom:2:17"},
		{"memo in the part's keyspace", PartKeyspace("crawl7", 0, 1).Key("memo"), "crawl7:{dedup}:memo"},
		{"stats", StatsKey("crawl7"), "crawl7:{dedup}:bloom:stats"},
		{"meta of part 3 of 8", MetaKey("crawl7", Tag(3, 8)), "crawl7:{dedup:3:1}:bloom:meta"},
		{"bitmap of part 3 of 8", BitmapKeyIn(PartKeyspace("crawl7", 3, 8), 1, 4), "crawl7:{dedup:3:1}:bloom:1:4"},
		// The default prefix, as every Trawl key has it; the stats hash with the others.
		{"meta, default prefix", MetaKey("", Tag(0, 1)), "trawl:{dedup}:bloom:meta"},
		{"stats, default prefix", StatsKey(""), "trawl:{dedup}:bloom:stats"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}

package contentdup

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/trawl/trawl/services/parser/internal/simhash"
	"github.com/trawl/trawl/shared/redisx"
)

func mustNew(t *testing.T, parts int) *Index {
	t.Helper()
	ix, err := New(nil, "trawl", Options{MaxDistance: 3, BucketCap: 64, Parts: parts})
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// The partition of a key is part of the stored layout: a change of the hash would look
// for every existing key in another partition, so the mapping is pinned.
func TestPartitionMappingIsPinned(t *testing.T) {
	ix := mustNew(t, 16)
	const h = uint64(0x0123456789abcdef)
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"exact", exactKey(ix, strings.Repeat("ab", 32)), "trawl:{content:2:11}:exact:abab " + strings.Repeat("ab", 8)},
		{"exact of another digest", exactKey(ix, strings.Repeat("01", 32)), "trawl:{content:3:12}:exact:0101 " + strings.Repeat("01", 8)},
		{"band 0", ix.BandKey(0, h), "trawl:{content:4:41}:band:0:0123"},
		{"band 1", ix.BandKey(1, h), "trawl:{content:3:12}:band:1:4567"},
		{"band 2", ix.BandKey(2, h), "trawl:{content:13:10}:band:2:89ab"},
		{"band 3", ix.BandKey(3, h), "trawl:{content:0:2}:band:3:cdef"},
		{"seq stays single", ix.SeqKey(), "trawl:{content}:seq"},
		{"meta stays single", ix.MetaKey(), "trawl:{content}:meta"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("key %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func TestPartitionOfAKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, parts := range []int{1, 2, 3, 16, MaxParts} {
		t.Run(fmt.Sprint(parts), func(t *testing.T) {
			ix := mustNew(t, parts)
			if ix.Parts() != parts {
				t.Fatalf("Parts() = %d", ix.Parts())
			}
			for range 200 {
				h := rng.Uint64()
				dig := fmt.Sprintf("%016x", rng.Uint64())
				p := ix.ExactPart(dig)
				if k := exactKey(ix, dig); p < 0 || p >= parts || !strings.HasPrefix(k, "trawl:{"+Tag(p, parts)+"}:exact:") {
					t.Fatalf("digest %s: part %d, key %s", dig, p, k)
				}
				for b := range simhash.Bands {
					p := ix.BandPart(b, h)
					if p < 0 || p >= parts || !strings.HasPrefix(ix.BandKey(b, h), "trawl:{"+Tag(p, parts)+"}:band:") {
						t.Fatalf("band %d of %016x: part %d, key %s", b, h, p, ix.BandKey(b, h))
					}
					// Every SimHash with this band value shares the bucket, so the other
					// bands must not move it.
					other := h ^ (rng.Uint64() &^ (uint64(0xffff) << (48 - 16*b)))
					if ix.BandKey(b, other) != ix.BandKey(b, h) {
						t.Fatalf("band %d: %016x and %016x agree on it but have buckets %s and %s", b, h, other, ix.BandKey(b, h), ix.BandKey(b, other))
					}
				}
			}
		})
	}
}

// With one partition the keys are those of an index made before partitions existed.
func TestOnePartitionKeepsTheLayout(t *testing.T) {
	for _, parts := range []int{0, 1} {
		ix := mustNew(t, parts)
		if got := exactKey(ix, "abcd0123"); got != "trawl:{content}:exact:abcd 0123" {
			t.Errorf("parts %d: exact key %q", parts, got)
		}
		if got := ix.BandKey(2, 0x0123456789abcdef); got != "trawl:{content}:band:2:89ab" {
			t.Errorf("parts %d: band key %q", parts, got)
		}
		if ix.scheme != simhash.HashVersion {
			t.Errorf("parts %d: meta %q, want the bare scheme %q", parts, ix.scheme, simhash.HashVersion)
		}
	}
	if ix := mustNew(t, 8); ix.scheme != simhash.HashVersion+" parts=8" {
		t.Errorf("meta of 8 partitions: %q", ix.scheme)
	}
}

// Keys spread evenly over the partitions, and the partitions over the slot space, so that
// the masters of a cluster with equal slot ranges take equal shares.
func TestPartitionsSpreadEvenly(t *testing.T) {
	const parts = 16
	ix := mustNew(t, parts)
	rng := rand.New(rand.NewPCG(7, 8))
	exact := make([]int, parts)
	const digests = 64_000
	for range digests {
		exact[ix.ExactPart(fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()))]++
	}
	band := make([]int, parts)
	for b := range simhash.Bands {
		for v := range 1 << 16 {
			band[ix.BandPart(b, uint64(v)<<(48-16*b))]++
		}
	}
	for p := range parts {
		if d := float64(exact[p])/(digests/parts) - 1; d < -0.1 || d > 0.1 {
			t.Errorf("partition %d holds %d of %d digests", p, exact[p], digests)
		}
		if d := float64(band[p])/(simhash.Bands<<16/parts) - 1; d < -0.05 || d > 0.05 {
			t.Errorf("partition %d holds %d of %d buckets", p, band[p], simhash.Bands<<16)
		}
		lo, hi := p*redisx.Slots/parts, (p+1)*redisx.Slots/parts
		if s := redisx.Slot("{" + Tag(p, parts) + "}"); s < lo || s >= hi {
			t.Errorf("partition %d: slot %d outside %d..%d", p, s, lo, hi-1)
		}
	}
}

// decide takes indexed candidates and the originals of the batch before a page; on equal
// distance the indexed one wins, and among indexed ones the lower seq.
func TestDecideTies(t *testing.T) {
	ix := mustNew(t, 1)
	const h = uint64(0xaaaa_bbbb_cccc_dddd)
	tests := []struct {
		name  string
		pages []Page
		found []found
		want  []Verdict
	}{
		{"indexed before batch at equal distance",
			[]Page{{URL: "b1", SimHash: h ^ 1, Near: true, Store: true}, {URL: "p", SimHash: h ^ 2, Near: true, Store: true}},
			[]found{{}, {cands: []candidate{{dist: 2, seq: 9, url: "idx"}}}},
			[]Verdict{{Kind: Original}, {Kind: Near, Of: "idx", Distance: 2}}},
		{"closer batch original wins",
			[]Page{{URL: "b1", SimHash: h, Near: true, Store: true}, {URL: "p", SimHash: h ^ 1, Near: true, Store: true}},
			[]found{{}, {cands: []candidate{{dist: 3, seq: 1, url: "idx"}}}},
			[]Verdict{{Kind: Original}, {Kind: Near, Of: "b1", Distance: 1}}},
		{"lower seq among the partitions' candidates",
			[]Page{{URL: "p", SimHash: h, Near: true, Store: true}},
			[]found{{cands: []candidate{{dist: 2, seq: 7, url: "late"}, {dist: 2, seq: 3, url: "early"}, {dist: 3, seq: 1, url: "far"}}}},
			[]Verdict{{Kind: Near, Of: "early", Distance: 2}}},
		{"earlier of two batch originals",
			[]Page{{URL: "b1", SimHash: h ^ 1, Near: true, Store: true}, {URL: "b2", SimHash: h ^ 0xf0000, Near: true, Store: true}, {URL: "p", SimHash: h ^ 0x10000, Near: true, Store: true}},
			[]found{{}, {}, {}},
			[]Verdict{{Kind: Original}, {Kind: Original}, {Kind: Near, Of: "b1", Distance: 2}}},
		{"unstored page is no batch original",
			[]Page{{URL: "b1", SimHash: h, Near: true}, {URL: "p", SimHash: h, Near: true, Store: true}},
			[]found{{}, {}},
			[]Verdict{{Kind: Original}, {Kind: Original}}},
		{"own URL earlier in the batch",
			[]Page{{URL: "p", SimHash: h, Near: true, Store: true}, {URL: "p", SimHash: h, Near: true, Store: true}},
			[]found{{}, {}},
			[]Verdict{{Kind: Original}, {Kind: Original}}},
		{"exact before near, own URL is no exact duplicate",
			[]Page{{URL: "p", Digest: "d", SimHash: h, Near: true, Store: true}, {URL: "q", Digest: "d", SimHash: h, Near: true, Store: true}},
			[]found{{first: "p"}, {first: "o", cands: []candidate{{dist: 0, seq: 1, url: "n"}}}},
			[]Verdict{{Kind: Original}, {Kind: Exact, Of: "o"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _ := ix.decide(tt.pages, tt.found, 1)
			for i, v := range tt.want {
				if res.Verdicts[i] != v {
					t.Errorf("page %d: %+v, want %+v", i, res.Verdicts[i], v)
				}
			}
		})
	}
}

// An original whose band entries all exist (a retried batch) needs no insert, and one
// with some missing inserts only those, each call holding one partition's bands.
func TestDecideInserts(t *testing.T) {
	ix := mustNew(t, 16)
	const h = uint64(0x0123456789abcdef)
	pages := []Page{{URL: "a", SimHash: h, Near: true, Store: true}}
	if _, calls := ix.decide(pages, []found{{present: 0b1111}}, 5); len(calls) != 0 {
		t.Errorf("a page whose entries all exist makes %d insert calls", len(calls))
	}
	_, calls := ix.decide(pages, []found{{present: 0b1010}}, 5)
	mask := 0
	for _, c := range calls {
		if len(c.args) != 4 || c.args[1] != simhash.Format(h) || c.args[2] != "5 a" {
			t.Fatalf("insert call %v %v", c.keys, c.args)
		}
		m := c.args[3].(int)
		for b := range simhash.Bands {
			if m&(1<<b) != 0 && !strings.HasPrefix(ix.BandKey(b, h), c.keys[0]) {
				t.Errorf("band %d (%s) sent to the partition of %s", b, ix.BandKey(b, h), c.keys[0])
			}
		}
		mask |= m
	}
	if mask != 0b0101 {
		t.Errorf("inserted bands %04b, want 0101", mask)
	}
}

// exactKey is digest's exact bucket and field, "<key> <field>".
func exactKey(ix *Index, digest string) string {
	k, f := ix.ExactKey(digest)
	return k + " " + f
}

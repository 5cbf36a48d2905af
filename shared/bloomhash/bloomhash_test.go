package bloomhash

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Golden values: a change to the hashes or positions must fail here, because it would make
// every existing filter read the wrong bits (and must come with a new Scheme).
func TestHashesGolden(t *testing.T) {
	tests := []struct {
		url    string
		h1, h2 uint64
	}{
		{"", 0xef46db3751d8e999, 0xc4349fc93c010000},
		{"abc", 0x44bc2cf5ad770999, 0x2ed0f59d6b43ac8b},
		{"https://example.com/", 0xa40dbfe31cfba1cf, 0x9ce4a6f2566ed97f},
		{"http://a.test/x?y=1", 0xc1820c0458e2a0ea, 0xceb9293c44098253},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			h1, h2 := Hashes(tt.url)
			if h1 != tt.h1 || h2 != tt.h2 {
				t.Errorf("Hashes(%q) = (%#x, %#x), want (%#x, %#x)", tt.url, h1, h2, tt.h1, tt.h2)
			}
		})
	}
}

func TestPositionsGolden(t *testing.T) {
	tests := []struct {
		name       string
		m, keyBits uint64
		k          int
		want       []Pos
	}{
		{
			// TRAWL_BLOOM_CAPACITY=10000000, FP 0.01, key bits 2^31: m=95850584, k=7.
			name: "defaults, one key",
			m:    95_850_584, k: 7, keyBits: 1 << 31,
			want: []Pos{{Key: 0, Offset: 13975887}, {Key: 0, Offset: 24286022}, {Key: 0, Offset: 34596157}, {Key: 0, Offset: 44906292}, {Key: 0, Offset: 55216427}, {Key: 0, Offset: 65526562}, {Key: 0, Offset: 75836697}},
		},
		{
			// capacity 100000, FP 0.01, key bits 2^16: m=958506, 15 keys.
			name: "15 keys of 2^16 bits",
			m:    958_506, k: 7, keyBits: 1 << 16,
			want: []Pos{{Key: 10, Offset: 55793}, {Key: 6, Offset: 35460}, {Key: 2, Offset: 15127}, {Key: 12, Offset: 35796}, {Key: 8, Offset: 15463}, {Key: 3, Offset: 60666}, {Key: 14, Offset: 15799}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Positions(nil, "https://example.com/", tt.m, tt.k, tt.keyBits); !slices.Equal(got, tt.want) {
				t.Errorf("Positions = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSize(t *testing.T) {
	if m, k := Size(10_000_000, 0.01); m != 95_850_584 || k != 7 {
		t.Fatalf("Size(10M, 0.01) = %d, %d", m, k)
	}
}

// A URL's part must never change across releases (it would be looked up in the wrong
// sub-filter and crawled again), and the parts must take equal shares of the URLs so
// that no Redis Cluster node takes more of the seen-test traffic than the others.
func TestPart(t *testing.T) {
	golden := []struct {
		url   string
		parts int
		want  int
	}{
		{"https://example.com/", 1, 0},
		{"https://example.com/", 16, 10},
		{"https://example.com/", 3, 2},
		{"http://a.test/x?y=1", 16, 13},
	}
	for _, g := range golden {
		if got := Part(g.url, g.parts); got != g.want {
			t.Errorf("Part(%q, %d) = %d, want %d", g.url, g.parts, got, g.want)
		}
	}
	for _, parts := range []int{2, 3, 16, 100} {
		t.Run(strconv.Itoa(parts), func(t *testing.T) {
			const n = 200_000
			counts := make([]int, parts)
			for i := range n {
				p := Part("http://h"+strconv.Itoa(i%97)+".test/p/"+strconv.Itoa(i), parts)
				if p < 0 || p >= parts {
					t.Fatalf("Part = %d, want 0..%d", p, parts-1)
				}
				counts[p]++
			}
			// Each share within 6 standard deviations of n/parts.
			mean := float64(n) / float64(parts)
			sd := math.Sqrt(mean * (1 - 1/float64(parts)))
			for i, c := range counts {
				if math.Abs(float64(c)-mean) > 6*sd {
					t.Errorf("part %d has %d URLs, want about %.0f", i, c, mean)
				}
			}
		})
	}
	if Tag(0, 1) != "dedup" || !strings.HasPrefix(Tag(3, 16), "dedup:3:") {
		t.Errorf("Tag(0, 1) = %q, Tag(3, 16) = %q", Tag(0, 1), Tag(3, 16))
	}
}

package bloom

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/trawl/trawl/shared/bloomhash"
)

func TestSize(t *testing.T) {
	// Expected values computed independently (Python, math.ceil / round) from
	// m = ceil(-n ln p / ln2^2), k = max(1, round(m/n ln2)).
	tests := []struct {
		name string
		n    uint64
		p    float64
		m    uint64
		k    int
	}{
		{"defaults", 10_000_000, 0.01, 95_850_584, 7},
		{"itest capacity", 100_000, 0.01, 958_506, 7},
		{"minimum capacity", 1000, 0.01, 9586, 7},
		{"one per mille", 1_000_000, 0.001, 14_377_588, 10},
		{"one per million", 5000, 1e-6, 143_776, 20},
		{"half", 1000, 0.5, 1443, 1},
		{"k rounds to zero, clamped to one", 1000, 0.9, 220, 1},
		{"a billion urls", 1_000_000_000, 0.01, 9_585_058_378, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, k := Size(tt.n, tt.p)
			if m != tt.m || k != tt.k {
				t.Errorf("Size(%d, %v) = (%d, %d), want (%d, %d)", tt.n, tt.p, m, k, tt.m, tt.k)
			}
		})
	}
}

func TestDefaultMemory(t *testing.T) {
	f, err := New("trawl", Params{Capacity: 10_000_000, FPRate: 0.01, KeyBits: 1 << 31})
	if err != nil {
		t.Fatal(err)
	}
	// The package comment promises ~13.8 MB in one key for the first layer (p/2), and
	// ~31 MB for the second (twice the URLs at p/4).
	if got := f.Bytes(); got != 13_784_692 {
		t.Errorf("Bytes() = %d, want 13784692", got)
	}
	if next := f.NextLayer(); next.Bytes() != 31_176_122 || next.K != 9 || next.N != 20_000_000 {
		t.Errorf("next layer %+v, want 20M URLs, k = 9, 31176122 bytes", next)
	}
	if f.Keys != 1 {
		t.Errorf("Keys = %d, want 1", f.Keys)
	}
}

// The golden hash and position vectors live in shared/bloomhash; here the filter must size
// itself as documented and take its positions from that scheme.
func TestPositionsUseSharedScheme(t *testing.T) {
	tests := []struct {
		name    string
		p       Params
		m       uint64
		k, keys int
	}{
		// The first layer is sized for p·(1 − r) = p/2.
		{"defaults, one key", Params{Capacity: 10_000_000, FPRate: 0.01, KeyBits: 1 << 31}, 110_277_535, 8, 1},
		{"17 keys of 2^16 bits", Params{Capacity: 100_000, FPRate: 0.01, KeyBits: 1 << 16}, 1_102_776, 8, 17},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := New("trawl", tt.p)
			if err != nil {
				t.Fatal(err)
			}
			if f.M != tt.m || f.K != tt.k || f.Keys != tt.keys {
				t.Fatalf("m, k, keys = %d, %d, %d; want %d, %d, %d", f.M, f.K, f.Keys, tt.m, tt.k, tt.keys)
			}
			for _, u := range []string{"https://example.com/", "http://a.test/x?y=1"} {
				got := f.Positions(nil, u)
				if want := bloomhash.Positions(nil, u, tt.m, tt.k, tt.p.KeyBits); !slices.Equal(got, want) {
					t.Errorf("Positions(%q) = %v, want %v", u, got, want)
				}
			}
		})
	}
}

func TestKeySplit(t *testing.T) {
	// The same URL in a filter of the same m but smaller keys must map to the same global
	// bit: key·KeyBits + offset is invariant, only the split changes.
	one, err := New("trawl", Params{Capacity: 100_000, FPRate: 0.01, KeyBits: 1 << 31})
	if err != nil {
		t.Fatal(err)
	}
	for _, keyBits := range []uint64{1 << 16, 1 << 12, 8000, 8} {
		if keyBits == 8 {
			// 1102776 bits in 8-bit keys would need far more than MaxKeys keys.
			if _, err := New("trawl", Params{Capacity: 100_000, FPRate: 0.01, KeyBits: keyBits}); !errors.Is(err, ErrParams) {
				t.Errorf("KeyBits 8: err = %v, want ErrParams", err)
			}
			continue
		}
		split, err := New("trawl", Params{Capacity: 100_000, FPRate: 0.01, KeyBits: keyBits})
		if err != nil {
			t.Fatal(err)
		}
		if want := int((one.M + keyBits - 1) / keyBits); split.Keys != want {
			t.Errorf("KeyBits %d: Keys = %d, want %d", keyBits, split.Keys, want)
		}
		for _, u := range []string{"https://example.com/", "http://a.test/x?y=1", "https://b.test/"} {
			a, b := one.Positions(nil, u), split.Positions(nil, u)
			for i := range a {
				global := uint64(b[i].Key)*keyBits + uint64(b[i].Offset)
				if a[i].Key != 0 || uint64(a[i].Offset) != global {
					t.Errorf("KeyBits %d, %s, position %d: split %v = bit %d, unsplit bit %d", keyBits, u, i, b[i], global, a[i].Offset)
				}
				if uint64(b[i].Offset) >= keyBits || int(b[i].Key) >= split.Keys || global >= split.M {
					t.Errorf("KeyBits %d: position %v out of range", keyBits, b[i])
				}
			}
		}
	}
}

func TestKeyNames(t *testing.T) {
	f, err := New("crawl7", Params{Capacity: 100_000, FPRate: 0.01, KeyBits: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	names := f.KeyNames()
	if len(names) != 17 || names[0] != "crawl7:{dedup}:bloom:0:0" || names[16] != "crawl7:{dedup}:bloom:0:16" {
		t.Errorf("KeyNames = %v", names)
	}
	if next := f.NextLayer().KeyNames(); next[0] != "crawl7:{dedup}:bloom:1:0" {
		t.Errorf("next layer's keys %v", next)
	}
	if f.MetaKey() != "crawl7:{dedup}:bloom:meta" {
		t.Errorf("MetaKey = %q", f.MetaKey())
	}
	// The stats key is the shared name the status page reads, in the filter's keyspace.
	if f.StatsKey() != "crawl7:{dedup}:bloom:stats" {
		t.Errorf("StatsKey = %q", f.StatsKey())
	}
	// A filter in parts: each part's keys under its own tag, as dedup has written them.
	parts, err := NewParts("crawl7", Params{Capacity: 800_000, FPRate: 0.01, KeyBits: 1 << 16, Parts: 8})
	if err != nil {
		t.Fatal(err)
	}
	p := parts[3]
	if p.KeyNames()[0] != "crawl7:{dedup:3:1}:bloom:0:0" || p.MetaKey() != "crawl7:{dedup:3:1}:bloom:meta" ||
		p.Keyspace().Key("memo") != "crawl7:{dedup:3:1}:memo" || p.StatsKey() != "crawl7:{dedup}:bloom:stats" {
		t.Errorf("part 3 of 8: keys %v, meta %q, memo %q, stats %q", p.KeyNames()[:1], p.MetaKey(), p.Keyspace().Key("memo"), p.StatsKey())
	}
}

// A record holds the URL's index, then each layer's k positions, grouped by key within a
// layer (the script sets one key's bits with one BITFIELD).
func TestAppendRecord(t *testing.T) {
	f, err := New("trawl", Params{Capacity: 100_000, FPRate: 0.01, KeyBits: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	next := f.NextLayer()
	lo := layout([]Layer{f.Layer, next}, 1)
	if want := 4 + 15*(f.K+next.K); lo.RecordSize() != want {
		t.Fatalf("record size %d, want %d", lo.RecordSize(), want)
	}
	rec := lo.AppendRecord([]byte("x"), 513, "https://example.com/")
	if len(rec) > 1+lo.RecordSize() {
		t.Fatalf("record length %d, want at most %d", len(rec), 1+lo.RecordSize())
	}
	rec = rec[1:]
	if idx := binary.BigEndian.Uint32(rec); idx != 513 {
		t.Errorf("index %d, want 513", idx)
	}
	at := 4
	for _, l := range lo.Layers {
		want := bloomhash.Positions(nil, "https://example.com/", l.M, l.K, f.KeyBits)
		var got []Pos
		for range l.K {
			key := binary.BigEndian.Uint32(rec[at:])
			end := at + 4 + bytes.IndexByte(rec[at+4:], 0)
			off, err := strconv.ParseUint(string(rec[at+4:end]), 10, 32)
			if err != nil {
				t.Fatalf("offset at %d: %v", at, err)
			}
			got = append(got, Pos{Key: key, Offset: uint32(off)})
			at = end + 1
		}
		if !slices.IsSortedFunc(got, func(a, b Pos) int { return int(a.Key) - int(b.Key) }) {
			t.Errorf("layer %d: positions %v not grouped by key", l.Index, got)
		}
		slices.SortFunc(want, func(a, b Pos) int { return int(a.Key)*(1<<20) + int(a.Offset) - int(b.Key)*(1<<20) - int(b.Offset) })
		slices.SortFunc(got, func(a, b Pos) int { return int(a.Key)*(1<<20) + int(a.Offset) - int(b.Key)*(1<<20) - int(b.Offset) })
		if !slices.Equal(got, want) {
			t.Errorf("layer %d: positions %v, want %v", l.Index, got, want)
		}
	}
	if at != len(rec) {
		t.Errorf("record has %d bytes after the last layer", len(rec)-at)
	}
	// The spec tells the script each layer's k and where its bitmaps start in KEYS.
	if n := binary.BigEndian.Uint32(lo.spec); n != 2 {
		t.Errorf("spec layers %d", n)
	}
	if k, base, keys := binary.BigEndian.Uint32(lo.spec[16:]), binary.BigEndian.Uint32(lo.spec[20:]), binary.BigEndian.Uint32(lo.spec[24:]); int(k) != next.K || int(base) != 2+f.Keys || int(keys) != next.Keys {
		t.Errorf("second layer spec k=%d base=%d keys=%d, want %d, %d, %d", k, base, keys, next.K, 2+f.Keys, next.Keys)
	}
}

func TestValidate(t *testing.T) {
	ok := Params{Capacity: 10_000_000, FPRate: 0.01, KeyBits: 1 << 31}
	tests := []struct {
		name string
		edit func(*Params)
		ok   bool
	}{
		{"defaults", func(*Params) {}, true},
		{"key bits at the redis limit", func(p *Params) { p.KeyBits = 1 << 32 }, true},
		{"key bits over the redis limit", func(p *Params) { p.KeyBits = 1<<32 + 8 }, false},
		{"key bits not whole bytes", func(p *Params) { p.KeyBits = 1<<16 + 1 }, false},
		{"zero key bits", func(p *Params) { p.KeyBits = 0 }, false},
		{"capacity too small", func(p *Params) { p.Capacity = 999 }, false},
		{"p zero", func(p *Params) { p.FPRate = 0 }, false},
		{"p one", func(p *Params) { p.FPRate = 1 }, false},
		{"p negative", func(p *Params) { p.FPRate = -0.1 }, false},
		{"too many keys", func(p *Params) { p.KeyBits = 8192 }, false},
		{"too many hashes", func(p *Params) { p.FPRate = 1e-30 }, false},
		{"growth zero is the default", func(p *Params) { p.Growth = 0 }, true},
		{"growth one", func(p *Params) { p.Growth = 1 }, true},
		{"growth too large", func(p *Params) { p.Growth = MaxGrowth + 1 }, false},
		{"growth negative", func(p *Params) { p.Growth = -1 }, false},
		{"tighten one", func(p *Params) { p.Tighten = 1 }, false},
		{"tighten negative", func(p *Params) { p.Tighten = -0.5 }, false},
		{"tighten 0.9", func(p *Params) { p.Tighten = 0.9 }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ok
			tt.edit(&p)
			err := p.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate(%+v) = %v, want ok=%v", p, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrParams) {
				t.Errorf("error %v does not wrap ErrParams", err)
			}
		})
	}
}

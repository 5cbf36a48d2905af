package contentdup

import (
	"errors"
	"io/fs"
	"math/bits"
	"strconv"
	"strings"
	"testing"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		ok   bool
	}{
		{"defaults", Options{MaxDistance: 3, BucketCap: 64}, true},
		{"exact SimHash only", Options{MaxDistance: 0, BucketCap: 1}, true},
		{"largest cap", Options{MaxDistance: 3, BucketCap: MaxBucketCap}, true},
		{"distance beyond the bands", Options{MaxDistance: 4, BucketCap: 64}, false},
		{"negative distance", Options{MaxDistance: -1, BucketCap: 64}, false},
		{"no bucket room", Options{MaxDistance: 3, BucketCap: 0}, false},
		{"cap too large", Options{MaxDistance: 3, BucketCap: MaxBucketCap + 1}, false},
		{"most partitions", Options{MaxDistance: 3, BucketCap: 64, Parts: MaxParts}, true},
		{"too many partitions", Options{MaxDistance: 3, BucketCap: 64, Parts: MaxParts + 1}, false},
		{"negative partitions", Options{MaxDistance: 3, BucketCap: 64, Parts: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrOptions)) {
				t.Errorf("Validate(%+v) = %v, want ok=%v", tt.o, err, tt.ok)
			}
			if _, nerr := New(nil, "trawl", tt.o); (nerr == nil) != tt.ok {
				t.Errorf("New accepted=%v, want %v", nerr == nil, tt.ok)
			}
		})
	}
}

func TestKeyNames(t *testing.T) {
	ix, err := New(nil, "crawl7", Options{MaxDistance: 3, BucketCap: 64})
	if err != nil {
		t.Fatal(err)
	}
	h := uint64(0x0123456789abcdef)
	for i, want := range []string{"crawl7:{content}:band:0:0123", "crawl7:{content}:band:1:4567", "crawl7:{content}:band:2:89ab", "crawl7:{content}:band:3:cdef"} {
		if got := ix.BandKey(i, h); got != want {
			t.Errorf("BandKey(%d) = %q, want %q", i, got, want)
		}
	}
	if got := exactKey(ix, "ab12cd"); got != "crawl7:{content}:exact:ab12 cd" {
		t.Errorf("ExactKey = %q", got)
	}
	if got := ix.SeqKey(); got != "crawl7:{content}:seq" {
		t.Errorf("SeqKey = %q", got)
	}
	if got := ix.MetaKey(); got != "crawl7:{content}:meta" {
		t.Errorf("MetaKey = %q", got)
	}
}

func TestKindString(t *testing.T) {
	for k, s := range map[Kind]string{Original: "original", Exact: "exact", Near: "near", Kind(9): "Kind(9)"} {
		if k.String() != s {
			t.Errorf("Kind %d = %q, want %q", int(k), k.String(), s)
		}
	}
}

// TestPopTable checks the byte popcount table written as a constant in lua/lookup.lua: a
// wrong entry would miscount distances and report false near duplicates, or miss real ones.
func TestPopTable(t *testing.T) {
	src, err := fs.ReadFile(luaFS, "lua/lookup.lua")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(src), "local pop = {")
	body, _, ok2 := strings.Cut(rest, "}")
	if !ok || !ok2 {
		t.Fatal("lua/lookup.lua has no 'local pop = {...}' table")
	}
	body, ok = strings.CutPrefix(strings.TrimSpace(body), "[0]=")
	if !ok {
		t.Fatal("the pop table does not start at [0]")
	}
	fields := strings.Split(body, ",")
	if len(fields) != 256 {
		t.Fatalf("the pop table has %d entries, want 256", len(fields))
	}
	for i, f := range fields {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("pop[%d] = %q: %v", i, f, err)
		}
		if want := bits.OnesCount8(uint8(i)); n != want {
			t.Errorf("pop[%d] = %d, want %d", i, n, want)
		}
	}
}

package seen

import (
	"slices"
	"testing"

	"github.com/trawl/trawl/services/dedup/internal/bloom"
)

func TestParseIndexes(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"", nil, false},
		{"0", []int{0}, false},
		{"0,3,17,4096", []int{0, 3, 17, 4096}, false},
		{"1,,2", nil, true},
		{"1,x", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseIndexes(tt.in)
			if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
				t.Errorf("parseIndexes(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestMemoKeysShareTheFilterSlot(t *testing.T) {
	f, err := bloom.New("crawl7", bloom.Params{Capacity: 1000, FPRate: 0.01, KeyBits: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	s := New(nil, f, "crawl7")
	// Same prefix and {dedup} hash tag as the bitmaps: one Redis Cluster slot per script.
	if got := s.MemoKey(); got != "crawl7:{dedup}:memo" {
		t.Errorf("MemoKey = %q", got)
	}
	if got := s.MemoSeqKey(); got != "crawl7:{dedup}:memo:seq" {
		t.Errorf("MemoSeqKey = %q", got)
	}
	if f.KeyNames()[0] != "crawl7:{dedup}:bloom:0:0" {
		t.Errorf("bitmap key %q", f.KeyNames()[0])
	}
}

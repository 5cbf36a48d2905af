package bloom

import (
	"errors"
	"slices"
	"testing"
)

// The vectors below are services/dedup/internal/bloom's golden values (bloom_test.go,
// TestHashesStable and TestPositionsGolden). They are repeated here on purpose: if dedup
// changes its scheme without bumping HashVersion, or this copy drifts, one side fails.
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
		name string
		meta Meta
		want []Pos
	}{
		{
			// TRAWL_BLOOM_CAPACITY=10000000, FP 0.01, key bits 2^31: m=95850584, k=7.
			name: "defaults, one key",
			meta: Meta{M: 95_850_584, K: 7, Keys: 1, KeyBits: 1 << 31},
			want: []Pos{{Key: 0, Offset: 13975887}, {Key: 0, Offset: 24286022}, {Key: 0, Offset: 34596157}, {Key: 0, Offset: 44906292}, {Key: 0, Offset: 55216427}, {Key: 0, Offset: 65526562}, {Key: 0, Offset: 75836697}},
		},
		{
			// capacity 100000, FP 0.01, key bits 2^16: m=958506, 15 keys.
			name: "15 keys of 2^16 bits",
			meta: Meta{M: 958_506, K: 7, Keys: 15, KeyBits: 1 << 16},
			want: []Pos{{Key: 10, Offset: 55793}, {Key: 6, Offset: 35460}, {Key: 2, Offset: 15127}, {Key: 12, Offset: 35796}, {Key: 8, Offset: 15463}, {Key: 3, Offset: 60666}, {Key: 14, Offset: 15799}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.meta.Positions(nil, "https://example.com/"); !slices.Equal(got, tt.want) {
				t.Errorf("Positions = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseMeta(t *testing.T) {
	good := map[string]string{"n": "100000", "p": "0.01", "m": "958506", "k": "7", "keys": "15", "key_bits": "65536", "hash": HashVersion}
	with := func(k, v string) map[string]string {
		m := make(map[string]string, len(good))
		for a, b := range good {
			m[a] = b
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name string
		h    map[string]string
		want error
	}{
		{"good", good, nil},
		{"missing", nil, ErrNoFilter},
		{"other scheme", with("hash", "xxh64-km-v2"), ErrScheme},
		{"no k", with("k", ""), ErrMeta},
		{"keys inconsistent", with("keys", "3"), ErrMeta},
		{"k too large", with("k", "65"), ErrMeta},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseMeta(tt.h)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("ParseMeta: err %v, want %v", err, tt.want)
			}
			if tt.want == nil && (m.M != 958506 || m.K != 7 || m.Keys != 15 || m.KeyBits != 65536 || m.FPRate != 0.01 || m.Capacity != 100000) {
				t.Errorf("ParseMeta = %+v", m)
			}
		})
	}
}

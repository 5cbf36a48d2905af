package bloomhash

import (
	"errors"
	"testing"
)

func TestParseMeta(t *testing.T) {
	good := map[string]string{"n": "100000", "p": "0.01", "growth": "2", "tighten": "0.5", "key_bits": "65536", "hash": Scheme,
		"layers": "2", "layer:0": "100000 958506 7 15", "count:0": "100000", "layer:1": "200000 2494090 9 39", "count:1": "12"}
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
		{"no layers", with("layers", ""), ErrMeta},
		{"missing layer", with("layers", "3"), ErrMeta},
		{"keys inconsistent", with("layer:1", "200000 2494090 9 3"), ErrMeta},
		{"k too large", with("layer:0", "100000 958506 65 15"), ErrMeta},
		{"layer garbled", with("layer:0", "100000 x"), ErrMeta},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseMeta(tt.h)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("ParseMeta: err %v, want %v", err, tt.want)
			}
			if tt.want == nil && (len(m.Layers) != 2 || m.Layers[0] != (Layer{Capacity: 100000, M: 958506, K: 7, Keys: 15, Count: 100000}) ||
				m.Layers[1] != (Layer{Capacity: 200000, M: 2494090, K: 9, Keys: 39, Count: 12}) || m.KeyBits != 65536 || m.FPRate != 0.01 ||
				m.Capacity != 100000 || m.Growth != 2 || m.Tighten != 0.5) {
				t.Errorf("ParseMeta = %+v", m)
			}
		})
	}
}

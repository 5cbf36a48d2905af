package bloom

import (
	"errors"
	"testing"
)

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

package config

import (
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
)

func TestDefaults(t *testing.T) {
	c, err := Load(envconfig.FromMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if c.Bloom.Capacity != 10_000_000 || c.Bloom.FPRate != 0.01 || c.Bloom.KeyBits != 1<<31 || c.Bloom.Growth != 2 || c.Bloom.Tighten != 0.5 || c.MemoTrimInterval != 30*time.Second {
		t.Errorf("bloom defaults = %+v", c.Bloom)
	}
	if c.MaxDepth != 20 || c.Batch != 256 || c.FillInterval != time.Minute || c.Common.HTTPAddr != ":9104" {
		t.Errorf("defaults: max depth %d, batch %d, fill %s, http %q", c.MaxDepth, c.Batch, c.FillInterval, c.Common.HTTPAddr)
	}
	if c.CacheSize != 50_000 || !c.Norm.StripSessionIDs || c.Norm.SortQuery {
		t.Errorf("defaults: cache size %d, normalisation %+v; want 50000, strip session ids, unsorted query", c.CacheSize, c.Norm)
	}
}

func TestOverrides(t *testing.T) {
	c, err := Load(envconfig.FromMap(map[string]string{
		"TRAWL_BLOOM_CAPACITY":      "100000",
		"TRAWL_BLOOM_FP_RATE":       "0.001",
		"TRAWL_BLOOM_KEY_BITS":      "65536",
		"TRAWL_MAX_DEPTH":           "3",
		"TRAWL_DEDUP_BATCH":         "1000",
		"TRAWL_BLOOM_FILL_INTERVAL": "0",
		"TRAWL_HTTP_ADDR":           "127.0.0.1:0",
		"TRAWL_DEDUP_CACHE_SIZE":    "0",
		"TRAWL_STRIP_SESSION_IDS":   "false",
		"TRAWL_SORT_QUERY":          "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Bloom.Capacity != 100_000 || c.Bloom.FPRate != 0.001 || c.Bloom.KeyBits != 65536 ||
		c.MaxDepth != 3 || c.Batch != 1000 || c.FillInterval != 0 || c.Common.HTTPAddr != "127.0.0.1:0" ||
		c.CacheSize != 0 || c.Norm.StripSessionIDs || !c.Norm.SortQuery {
		t.Errorf("overrides not applied: %+v", c)
	}
}

func TestInvalid(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string // in the error
	}{
		{map[string]string{"TRAWL_BLOOM_CAPACITY": "999"}, "TRAWL_BLOOM_CAPACITY"},
		{map[string]string{"TRAWL_BLOOM_CAPACITY": "-5"}, "TRAWL_BLOOM_CAPACITY"},
		{map[string]string{"TRAWL_BLOOM_FP_RATE": "0"}, "TRAWL_BLOOM_FP_RATE"},
		{map[string]string{"TRAWL_BLOOM_FP_RATE": "1"}, "TRAWL_BLOOM_FP_RATE"},
		{map[string]string{"TRAWL_BLOOM_KEY_BITS": "4294967304"}, "TRAWL_BLOOM_KEY_BITS"},
		{map[string]string{"TRAWL_BLOOM_KEY_BITS": "1001"}, "TRAWL_BLOOM_KEY_BITS"},
		{map[string]string{"TRAWL_BLOOM_KEY_BITS": "8"}, "keys"},
		{map[string]string{"TRAWL_MAX_DEPTH": "-1"}, "TRAWL_MAX_DEPTH"},
		// The scheduler refuses it: dedup must not accept a depth the frontier would not.
		{map[string]string{"TRAWL_MAX_DEPTH": "10001"}, "TRAWL_MAX_DEPTH"},
		{map[string]string{"TRAWL_DEDUP_BATCH": "0"}, "TRAWL_DEDUP_BATCH"},
		{map[string]string{"TRAWL_DEDUP_BATCH": "5000"}, "TRAWL_DEDUP_BATCH"},
		{map[string]string{"TRAWL_BLOOM_FILL_INTERVAL": "10ms"}, "TRAWL_BLOOM_FILL_INTERVAL"},
		{map[string]string{"TRAWL_BLOOM_GROWTH": "0"}, "TRAWL_BLOOM_GROWTH"},
		{map[string]string{"TRAWL_BLOOM_GROWTH": "17"}, "TRAWL_BLOOM_GROWTH"},
		{map[string]string{"TRAWL_BLOOM_TIGHTEN": "1"}, "TRAWL_BLOOM_TIGHTEN"},
		{map[string]string{"TRAWL_BLOOM_TIGHTEN": "0"}, "TRAWL_BLOOM_TIGHTEN"},
		{map[string]string{"TRAWL_DEDUP_MEMO_TRIM_INTERVAL": "0"}, "TRAWL_DEDUP_MEMO_TRIM_INTERVAL"},
		{map[string]string{"TRAWL_SHARDS": "0"}, "TRAWL_SHARDS"},
		{map[string]string{"TRAWL_DEDUP_CACHE_SIZE": "-1"}, "TRAWL_DEDUP_CACHE_SIZE"},
		{map[string]string{"TRAWL_DEDUP_CACHE_SIZE": "10000001"}, "TRAWL_DEDUP_CACHE_SIZE"},
	}
	for _, tt := range tests {
		t.Run(tt.want+"="+strings.Join(values(tt.env), ","), func(t *testing.T) {
			c, err := Load(envconfig.FromMap(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			err = c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error mentioning %s", err, tt.want)
			}
		})
	}
}

func TestUnparseable(t *testing.T) {
	_, err := Load(envconfig.FromMap(map[string]string{"TRAWL_BLOOM_FP_RATE": "one percent", "TRAWL_DEDUP_BATCH": "many", "TRAWL_STRIP_SESSION_IDS": "maybe"}))
	if err == nil || !strings.Contains(err.Error(), "TRAWL_BLOOM_FP_RATE") || !strings.Contains(err.Error(), "TRAWL_DEDUP_BATCH") || !strings.Contains(err.Error(), "TRAWL_STRIP_SESSION_IDS") {
		t.Errorf("Load() = %v, want both bad variables reported", err)
	}
}

func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func TestSeeds(t *testing.T) {
	tests := []struct {
		name  string
		seeds string
		want  int
		bad   bool
	}{
		{"none", "", 0, false},
		{"space and comma separated", "https://example.com/ http://example.org/a,http://example.net", 3, false},
		{"unsupported scheme", "https://example.com/ ftp://example.org/", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(envconfig.FromMap(map[string]string{"TRAWL_SEEDS": tc.seeds}))
			if err != nil {
				t.Fatal(err)
			}
			err = c.Validate()
			if tc.bad {
				if err == nil || !strings.Contains(err.Error(), "TRAWL_SEEDS") {
					t.Fatalf("Validate() = %v, want a TRAWL_SEEDS error", err)
				}
				return
			}
			if err != nil || len(c.Seeds) != tc.want {
				t.Fatalf("seeds %v, err %v; want %d seeds", c.Seeds, err, tc.want)
			}
		})
	}
}

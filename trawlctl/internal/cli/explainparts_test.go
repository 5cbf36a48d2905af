package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/bloomhash"
	"github.com/trawl/trawl/shared/testwait"

	"github.com/trawl/trawl/trawlctl/internal/inspect"
)

// A seen filter split into parts (TRAWL_BLOOM_PARTS) keeps each part under its own hash
// tag, as dedup lays it out (bloomhash.Tag of bloomhash.Part): explain reads the URL's
// part, and says so when its TRAWL_BLOOM_PARTS differs from the filter's.
func TestExplainBloomParts(t *testing.T) {
	s := startStack(t, 1)
	ctx := testwait.Context(t)
	const parts = 4
	seenURL, otherURL := "https://example.com/", "https://example.com/never-added"
	layer := bloomhash.Layer{Capacity: 25000, M: 239627, K: 7, Keys: 4}
	meta := bloomhash.Meta{KeyBits: 65536}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range parts {
			tag := bloomhash.Tag(i, parts)
			p.HSet(ctx, "trawl:{"+tag+"}:bloom:meta", "n", "25000", "p", "0.01", "growth", "2", "tighten", "0.5", "key_bits", "65536",
				"hash", bloomhash.Scheme, "layers", "1", "layer:0", "25000 239627 7 4", "parts", fmt.Sprint(parts), "part", fmt.Sprint(i))
		}
		tag := bloomhash.Tag(bloomhash.Part(seenURL, parts), parts)
		for _, ps := range meta.Positions(nil, layer, seenURL) {
			p.SetBit(ctx, fmt.Sprintf("trawl:{%s}:bloom:0:%d", tag, ps.Key), int64(ps.Offset), 1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, parts, url, state, detail string
	}{
		{"seen in its part", "4", seenURL, "seen", ""},
		{"not seen", "4", otherURL, "not seen", ""},
		{"parts unset", "1", seenURL, "unknown", "another TRAWL_BLOOM_PARTS than 1"},
		{"other parts", "2", seenURL, "unknown", "TRAWL_BLOOM_PARTS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := s.inv
			inv.env = map[string]string{"TRAWL_BLOOM_PARTS": tc.parts}
			for k, v := range s.inv.env {
				inv.env[k] = v
			}
			r := inv.run(t, "explain", "-json", tc.url)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			var rep inspect.Report
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("%v: %s", err, r.stdout)
			}
			if rep.Seen.State != tc.state || !strings.Contains(rep.Seen.Detail, tc.detail) {
				t.Errorf("seen %+v, want state %q with %q", rep.Seen, tc.state, tc.detail)
			}
		})
	}
}

package itest

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/shared/testwait"
)

var smallParams = bloom.Params{Capacity: 100_000, FPRate: 0.01, KeyBits: 1 << 31}

func TestBloomNewThenSeen(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	f := newFilter(t, c, "trawl", smallParams)

	batch := urls("a", 0, 500)
	got, err := f.TestAndSet(ctx, c, batch)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, span(0, 500)) {
		t.Fatalf("first pass: %d new, want all 500", len(got))
	}
	got, err = f.TestAndSet(ctx, c, batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("second pass: %d new (%v), want none", len(got), got[:min(5, len(got))])
	}
	// Half old, half new: only the new half comes back, with their indexes in this batch.
	mixed := append(urls("a", 250, 250), urls("a", 500, 250)...)
	got, err = f.TestAndSet(ctx, c, mixed)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, span(250, 250)) {
		t.Fatalf("mixed pass: new %v…, want indexes 250..499", got[:min(5, len(got))])
	}
	in, err := f.Contains(ctx, c, append(urls("a", 0, 750), "https://never.test/"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in, span(0, 750)) {
		t.Errorf("Contains: %d of 750 added URLs found, or the unseen one found: %v", len(in), in[len(in)-1])
	}
}

func TestBloomDuplicatesInBatch(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	f := newFilter(t, c, "trawl", smallParams)

	batch := []string{
		"https://x.test/1", "https://x.test/2", "https://x.test/1", "https://x.test/3",
		"https://x.test/2", "https://x.test/1",
	}
	got, err := f.TestAndSet(ctx, c, batch)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 3}; !slices.Equal(got, want) {
		t.Errorf("new %v, want %v (each URL new only the first time)", got, want)
	}
}

func TestBloomSpansKeys(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	p := bloom.Params{Capacity: 100_000, FPRate: 0.01, KeyBits: 1 << 16}
	f := newFilter(t, c, "trawl", p)
	if f.Keys != 17 {
		t.Fatalf("Keys = %d, want 17 (1102776 bits / 65536)", f.Keys)
	}
	// Pre-sized: every key exists at full length, the last one only as long as needed.
	for j, key := range f.KeyNames() {
		n, err := c.StrLen(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := int64(1 << 13)
		if j == f.Keys-1 {
			want = int64((f.M - uint64(j)<<16 + 7) / 8)
		}
		if n != want {
			t.Errorf("%s: %d bytes, want %d", key, n, want)
		}
	}

	batch := urls("span", 0, 2000)
	got, err := f.TestAndSet(ctx, c, batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2000 {
		t.Fatalf("%d new, want 2000", len(got))
	}
	// Bits landed in every key, and exactly where Positions says.
	for _, key := range f.KeyNames() {
		n, err := c.BitCount(ctx, key, nil).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("%s has no bits set after 2000 URLs", key)
		}
	}
	for _, u := range batch[:20] {
		for _, pos := range f.Positions(nil, u) {
			bit, err := c.GetBit(ctx, f.KeyNames()[pos.Key], int64(pos.Offset)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if bit != 1 {
				t.Errorf("%s: bit %v not set", u, pos)
			}
		}
	}
	got, err = f.TestAndSet(ctx, c, batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("second pass: %d new, want 0", len(got))
	}
	// No key grew past its pre-size: offsets stay within KeyBits.
	for _, key := range f.KeyNames()[:f.Keys-1] {
		if n, _ := c.StrLen(ctx, key).Result(); n != 1<<13 {
			t.Errorf("%s grew to %d bytes", key, n)
		}
	}
}

func TestBloomInitIdempotent(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	f := newFilter(t, c, "trawl", smallParams)
	if _, err := f.TestAndSet(ctx, c, urls("keep", 0, 100)); err != nil {
		t.Fatal(err)
	}
	// A restart with the same settings keeps the filter's contents.
	again := newFilter(t, c, "trawl", smallParams)
	got, err := again.TestAndSet(ctx, c, urls("keep", 0, 100))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("after re-init %d of 100 URLs new, want 0", len(got))
	}
	meta, err := c.HGetAll(ctx, f.MetaKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"n": "100000", "p": "0.01", "growth": "2", "tighten": "0.5", "key_bits": "2147483648",
		"hash": bloom.HashVersion, "layers": "1", "layer:0": "100000 1102776 8 1", "count:0": "100"}
	for k, v := range want {
		if meta[k] != v {
			t.Errorf("meta %s = %q, want %q", k, meta[k], v)
		}
	}
}

func TestBloomParameterMismatchRefused(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	newFilter(t, c, "trawl", smallParams)

	tests := []struct {
		name  string
		p     bloom.Params
		field string
	}{
		{"capacity", bloom.Params{Capacity: 200_000, FPRate: 0.01, KeyBits: 1 << 31}, "n="},
		{"fp rate", bloom.Params{Capacity: 100_000, FPRate: 0.001, KeyBits: 1 << 31}, "p="},
		{"key bits", bloom.Params{Capacity: 100_000, FPRate: 0.01, KeyBits: 1 << 16}, "key_bits="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := bloom.New("trawl", tt.p)
			if err != nil {
				t.Fatal(err)
			}
			err = f.Init(ctx, c)
			if !errors.Is(err, bloom.ErrMismatch) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("Init = %v, want ErrMismatch naming %s", err, tt.field)
			}
		})
	}
	// Another prefix is another filter: no conflict.
	newFilter(t, c, "other", bloom.Params{Capacity: 200_000, FPRate: 0.01, KeyBits: 1 << 31})

	// A different hash version is refused too.
	if err := c.HSet(ctx, "trawl:{dedup}:bloom:meta", "hash", "xxh64-km-v0").Err(); err != nil {
		t.Fatal(err)
	}
	f, _ := bloom.New("trawl", smallParams)
	if err := f.Init(ctx, c); !errors.Is(err, bloom.ErrMismatch) || !strings.Contains(err.Error(), "hash=") {
		t.Errorf("Init with another hash version = %v, want ErrMismatch", err)
	}
}

func TestBloomBitsWithoutMetaRefused(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	if err := c.SetBit(ctx, "trawl:{dedup}:bloom:0:0", 12345, 1).Err(); err != nil {
		t.Fatal(err)
	}
	f, _ := bloom.New("trawl", smallParams)
	if err := f.Init(ctx, c); err == nil || !strings.Contains(err.Error(), "exists but") {
		t.Errorf("Init over orphan bits = %v, want a refusal", err)
	}
	if n, _ := c.Exists(ctx, f.MetaKey()).Result(); n != 0 {
		t.Errorf("refused Init still wrote %s", f.MetaKey())
	}
}

// TestBloomFalsePositiveRate fills the filter to capacity and measures the false-positive
// rate on as many never-added URLs: it must be within 20 % of the first layer's rate,
// p·(1 − r).
func TestBloomFalsePositiveRate(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	f := newFilter(t, c, "trawl", bloom.Params{Capacity: 100_000, FPRate: 0.01, KeyBits: 1 << 16})
	rate, fill := measureFP(t, c, f)
	t.Logf("n=100000 p=0.01 m=%d k=%d keys=%d: measured false-positive rate %.5f (%.3f× the layer's %v), fill ratio %.4f",
		f.M, f.K, f.Keys, rate, rate/f.P, f.P, fill)
	if math.Abs(rate-f.P)/f.P > 0.20 {
		t.Errorf("false-positive rate %.5f is more than 20%% from %v", rate, f.P)
	}
	if n := len(f.Layers()); n != 1 {
		t.Errorf("%d layers at capacity, want 1", n)
	}
	// At capacity with the optimal k about half the bits are set: 1 − e^(−kn/m).
	if want := 1 - math.Exp(-float64(f.K)*1e5/float64(f.M)); math.Abs(fill-want) > 0.01 {
		t.Errorf("fill ratio %.4f, want %.4f", fill, want)
	}
}

// measureFP adds Capacity URLs, then checks Capacity others without adding them. It also
// returns the fill ratio at capacity.
func measureFP(t testing.TB, c *redis.Client, f *bloom.Filter) (rate, fill float64) {
	t.Helper()
	ctx := testwait.Context(t)
	n := int(f.Capacity)
	const batch = 5000
	for from := 0; from < n; from += batch {
		if _, err := f.TestAndSet(ctx, c, urls("in", from, min(batch, n-from))); err != nil {
			t.Fatal(err)
		}
	}
	fp := 0
	for from := 0; from < n; from += batch {
		got, err := f.Contains(ctx, c, urls("out", from, min(batch, n-from)))
		if err != nil {
			t.Fatal(err)
		}
		fp += len(got)
	}
	fill, err := f.FillRatio(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return float64(fp) / float64(n), fill
}

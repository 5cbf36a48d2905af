// Package bloomhash owns Trawl's URL-seen Bloom filter: its sizing, its bit-position scheme
// and its Redis layout. The dedup service (services/dedup/internal/bloom) is the one
// writer; trawlctl explain and the scheduler's status page read it through the read-only
// Reader (OpenReadOnly) and name no key themselves (devstack/workspace
// TestStoresHaveOneOwner). It lives in shared/ because its readers are other modules.
//
// For a capacity of n URLs and a false-positive rate p: m = ⌈−n·ln p / (ln 2)²⌉ bits and
// k = max(1, round(m/n · ln 2)) hash functions. Positions come from two 64-bit hashes of
// the normalised URL, h1 = XXH64(url, seed 0) and h2 = XXH64(url, seed 0x9E3779B97F4A7C15),
// combined by Kirsch–Mitzenmacher double hashing: position_i = (h1 + i·h2) mod m, computed
// exactly. XXH64 is published and seedable, so positions are the same in every process and
// release; Scheme names this and is stored with a filter so that a future change is refused
// instead of mixing two schemes. The m bits are split over bitmaps of keyBits bits each
// (a Redis string holds at most 2^32 bits).
//
// The filter is scalable (Almeida et al., "Scalable Bloom Filters", 2007): a stack of
// layers, each a plain Bloom filter with its own m and k. Layer i is sized for
// n_i = n·s^i URLs at p_i = p·(1−r)·r^i (growth s, tightening ratio r), so however many
// layers there are, the compound false-positive rate 1 − Π(1 − p_i) stays below
// Σ p_i < p. A URL is seen when all its bits are set in any layer; new URLs go to the
// newest layer, and a layer that holds n_i URLs is closed by adding the next one.
package bloomhash

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/cespare/xxhash/v2"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/redisx"
)

// Scheme names the hashing and position scheme of this package.
const Scheme = "xxh64-km-v1"

const seed2 = 0x9E3779B97F4A7C15

// Size returns the bit count m and hash count k for capacity n and false-positive rate p.
func Size(n uint64, p float64) (m uint64, k int) {
	ln2 := math.Ln2
	m = uint64(math.Ceil(-float64(n) * math.Log(p) / (ln2 * ln2)))
	k = max(1, int(math.Round(float64(m)/float64(n)*ln2)))
	return m, k
}

// LayerSize returns the capacity and false-positive rate of layer i (0-based) of a
// scalable filter with base capacity n, compound rate p, growth s and tightening ratio r.
func LayerSize(n uint64, p float64, s int, r float64, i int) (ni uint64, pi float64) {
	ni, pi = n, p*(1-r)
	for range i {
		ni *= uint64(s)
		pi *= r
	}
	return ni, pi
}

// MaxParts bounds the sub-filters the seen filter is split into (TRAWL_BLOOM_PARTS).
const MaxParts = 1024

// LoadParts reads TRAWL_BLOOM_PARTS: dedup splits the filter so, and trawlctl finds a
// URL's part by it.
func LoadParts(r *envconfig.Reader) int { return r.Int("BLOOM_PARTS", 1) }

// CheckParts reports a TRAWL_BLOOM_PARTS out of range.
func CheckParts(parts int) error {
	if parts < 1 || parts > MaxParts {
		return fmt.Errorf("TRAWL_BLOOM_PARTS=%d: want 1..%d", parts, MaxParts)
	}
	return nil
}

// seed3 seeds the hash that picks a URL's part, independent of the two that place its
// bits, so that the URLs of one part are spread over all of its bits.
const seed3 = 0xC2B2AE3D27D4EB4F

// Part returns which of parts sub-filters holds url: XXH64(url, seed3) reduced to
// 0..parts-1 by multiply-shift (Lemire), so each part takes 1/parts of the URLs.
func Part(url string, parts int) int {
	if parts <= 1 {
		return 0
	}
	var d xxhash.Digest
	d.ResetWithSeed(seed3)
	_, _ = d.WriteString(url)
	hi, _ := bits.Mul64(d.Sum64(), uint64(parts))
	return int(hi)
}

// Tag is the Redis Cluster hash tag of part i of a filter split into parts: "dedup" for
// a filter in one part (the layout of a filter made before parts existed), else
// redisx.SpreadTag("dedup", i, parts), "dedup:<i>:<j>", whose slots are evenly spaced so
// that the parts spread evenly over masters that own equal slot ranges.
func Tag(i, parts int) string {
	if parts <= 1 {
		return "dedup"
	}
	return redisx.SpreadTag("dedup", i, parts)
}

// StatsKey is the hash in which dedup publishes the seen filter's figures for operators
// (the status page, trawlctl): layers, capacity, count, fill, bytes, next_bytes, updated,
// as services/dedup/README.md describes under "Seen test".
// They are the whole filter's, whatever its parts: the hash is in the keyspace of a filter
// of one part.
func StatsKey(prefix string) string { return PartKeyspace(prefix, 0, 1).Key("bloom", "stats") }

// Hashes returns the two 64-bit hashes of a URL.
func Hashes(url string) (h1, h2 uint64) {
	var d xxhash.Digest
	d.ResetWithSeed(seed2)
	_, _ = d.WriteString(url)
	return xxhash.Sum64String(url), d.Sum64()
}

// Pos is one bit of the filter.
type Pos struct {
	Key    uint32 // bitmap index
	Offset uint32 // bit offset within that bitmap
}

// Positions appends the k bit positions of url in a filter of m bits split into bitmaps
// of keyBits bits.
func Positions(dst []Pos, url string, m uint64, k int, keyBits uint64) []Pos {
	h1, h2 := Hashes(url)
	return PositionsOf(dst, h1, h2, m, k, keyBits)
}

// PositionsOf is Positions for a URL whose Hashes are h1 and h2, so that a URL's
// positions in several layers cost one hashing.
func PositionsOf(dst []Pos, h1, h2, m uint64, k int, keyBits uint64) []Pos {
	// Reducing both hashes first and adding step by step keeps the sum below 2m, so the
	// result is exactly (h1 + i·h2) mod m instead of being skewed by 2^64 wrap-around.
	pos, step := h1%m, h2%m
	for range k {
		dst = append(dst, Pos{Key: uint32(pos / keyBits), Offset: uint32(pos % keyBits)})
		pos += step
		if pos >= m {
			pos -= m
		}
	}
	return dst
}

package contentdup

import (
	"context"
	"embed"
	"fmt"
	"math/bits"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/trawl/trawl/services/parser/internal/simhash"
	"github.com/trawl/trawl/shared/redisx"
)

// Tag is the hash tag of partition i of parts: "content" for an index in one partition
// (the layout before partitions existed), else redisx.SpreadTag("content", i, parts).
func Tag(i, parts int) string {
	if parts <= 1 {
		return "content"
	}
	return redisx.SpreadTag("content", i, parts)
}

// Seeds of the partition hashes, so that the partition of a key is independent of the
// bits that name it within the partition.
const (
	exactSeed = 0x27D4EB2F165667C5
	bandSeed  = 0x165667B19E3779F9
)

// ExactBuckets is the number of hashes the exact entries are spread over, whatever the
// crawl's size: a digest's bucket is its first ExactBucketDigits hex digits (the digest is
// SHA-256, so they are uniform). Fixed, so that TRAWL_CONTENT_EXACT_CAPACITY can change
// without moving an entry: each bucket holds at most ExactBucketCap of them.
const (
	ExactBucketDigits = 4
	ExactBuckets      = 1 << (4 * ExactBucketDigits)
	// exactFieldDigits of the digest after the bucket's name its entry: 80 bits of the
	// digest in all, so that two texts are taken for one with a chance of about
	// capacity / 2^80 per page (below 10^-16 at 10^8 entries).
	exactFieldDigits = 16
)

// exactSlot is the bucket and field of digest's entry, "<bucket>:<field>" as the lookup
// script takes it.
func exactSlot(digest string) (bucket, field string) {
	if len(digest) <= ExactBucketDigits {
		return digest, ""
	}
	return digest[:ExactBucketDigits], digest[ExactBucketDigits:min(len(digest), ExactBucketDigits+exactFieldDigits)]
}

// ExactPart is the partition of the exact entry of digest: XXH64 of its bucket reduced to
// 0..P-1 by multiply-shift (Lemire), so each partition takes 1/P of the buckets.
func (ix *Index) ExactPart(digest string) int {
	if len(ix.parts) == 1 {
		return 0
	}
	bucket, _ := exactSlot(digest)
	var d xxhash.Digest
	d.ResetWithSeed(exactSeed)
	_, _ = d.WriteString(bucket)
	return reduce(d.Sum64(), len(ix.parts))
}

// ExactBucketCap is the most entries of one exact bucket for an index of capacity entries
// (Options.ExactCapacity; 0: no cap).
func ExactBucketCap(capacity int64) int64 {
	if capacity <= 0 {
		return 0
	}
	return (capacity + ExactBuckets - 1) / ExactBuckets
}

// BandPart is the partition of the bucket of band i of h, a function of (i, band value)
// alone since every SimHash with that band value shares the bucket.
func (ix *Index) BandPart(i int, h uint64) int {
	if len(ix.parts) == 1 {
		return 0
	}
	v := simhash.Band(h, i)
	b := [3]byte{byte(i), byte(v >> 8), byte(v)}
	var d xxhash.Digest
	d.ResetWithSeed(bandSeed)
	_, _ = d.Write(b[:])
	return reduce(d.Sum64(), len(ix.parts))
}

func reduce(h uint64, n int) int {
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}

// Parts is the number of partitions.
func (ix *Index) Parts() int { return len(ix.parts) }

//go:embed lua/*.lua
var luaFS embed.FS

// The index's scripts; each file's header gives its KEYS, ARGV and reply.
var (
	initScript   = redisx.Script(redisx.Lua{FS: luaFS, Name: "lua/init.lua"})
	lookupScript = redisx.Script(redisx.Lua{FS: luaFS, Name: "lua/lookup.lua"})
	insertScript = redisx.Script(redisx.Lua{FS: luaFS, Name: "lua/insert.lua"})
)

// Init records the fingerprint scheme and the partition count in a new index, or checks
// that an existing index has this code's. A mismatch is ErrMismatch: comparing SimHashes
// of two schemes would report random near duplicates, and another partition count would
// look for every key in another place and start an empty index unseen, so the operator
// must restore the setting, delete the keys (losing the history) or run the matching
// release.
func (ix *Index) Init(ctx context.Context) error {
	v, err := initScript.Run(ctx, ix.rdb, []string{ix.meta}, ix.scheme).Text()
	if err != nil {
		return fmt.Errorf("contentdup: init %s: %w", ix.meta, err)
	}
	if v == ix.scheme {
		return nil
	}
	scheme, parts, _ := strings.Cut(v, partsMark)
	if parts == "" {
		parts = "1"
	}
	if scheme != simhash.HashVersion {
		return fmt.Errorf("%w: %s is %q, this parser computes %q; delete the index's keys (%s*) to start an empty one",
			ErrMismatch, ix.meta, v, simhash.HashVersion, strings.TrimSuffix(ix.meta, "meta"))
	}
	return fmt.Errorf("%w: %s records an index in %s partitions, TRAWL_CONTENT_PARTS is %d; "+
		"restore the setting, or delete the index's keys to start an empty one", ErrMismatch, ix.meta, parts, len(ix.parts))
}

// ExactKey is the hash (key) and its field holding the first URL with the text digest.
func (ix *Index) ExactKey(digest string) (key, field string) {
	bucket, field := exactSlot(digest)
	return ix.parts[ix.ExactPart(digest)] + "exact:" + bucket, field
}

// BandKey is the bucket of band i (0..simhash.Bands-1) of h.
func (ix *Index) BandKey(i int, h uint64) string {
	return fmt.Sprintf("%sband:%d:%04x", ix.parts[ix.BandPart(i, h)], i, simhash.Band(h, i))
}

// SeqKey is the counter that orders originals.
func (ix *Index) SeqKey() string { return ix.seq }

// MetaKey holds the fingerprint scheme of the stored hashes.
func (ix *Index) MetaKey() string { return ix.meta }

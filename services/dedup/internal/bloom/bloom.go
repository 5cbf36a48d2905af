// Package bloom is the URL-seen set of the dedup service: a Bloom filter kept as Redis
// bitmaps, tested and set for a whole batch of URLs in one Lua call.
//
// # Sizing
//
// For a capacity of n URLs and a target false-positive rate p (at n insertions):
//
//	m = ⌈−n·ln p / (ln 2)²⌉   bits
//	k = max(1, round(m/n · ln 2))   hash functions
//
// The defaults (TRAWL_BLOOM_CAPACITY=10,000,000, TRAWL_BLOOM_FP_RATE=0.01) give
// m = 95,850,584 bits (≈ 12.0 MB, 11.4 MiB of Redis memory) and k = 7. Memory grows
// linearly with n and with −ln p: 10⁹ URLs at 1 % take ≈ 1.2 GB.
//
// # Hashing
//
// Bit positions come from two 64-bit hashes of the normalised URL, h1 = XXH64(url, seed 0)
// and h2 = XXH64(url, seed 0x9E3779B97F4A7C15), combined by Kirsch–Mitzenmacher double
// hashing: position_i = (h1 + i·h2) mod m for i = 0..k−1 (computed exactly, without 64-bit
// wrap-around). XXH64 is a published, seedable algorithm, so the positions are the same in
// every process and every release; hash/maphash is randomised per process and would
// silently empty the filter on restart. HashVersion names this scheme and is stored with
// the filter so that a future change is refused instead of mixing two schemes.
//
// # Layout
//
// A Redis string holds at most 2³² bits, so the m bits are split over Keys bitmaps
// "<prefix>:{dedup}:bloom:<j>" of at most KeyBits bits each: position p lives in key
// p / KeyBits at offset p mod KeyBits. Every key shares the {dedup} hash tag, so a script
// touching all of them stays in one Redis Cluster slot. The parameters are stored in
// "<prefix>:{dedup}:bloom:meta"; Init refuses to run against a filter built with others.
package bloom

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/trawl/trawl/shared/bloomhash"

	"github.com/trawl/trawl/shared/redisx"
)

// HashVersion identifies the hash and position scheme (shared/bloomhash), stored with the
// filter so that a filter built with another scheme is refused.
const HashVersion = bloomhash.Scheme

// Limits that keep one batch call sane. MaxKeys bounds the KEYS list sent with every call;
// MaxK bounds the values struct.unpack returns per URL in the script.
const (
	MaxKeyBits = 1 << 32 // Redis's string limit is 512 MiB = 2^32 bits
	MaxKeys    = 1024
	MaxK       = 64
	// MinCapacity keeps the sizing formula away from degenerate tiny filters.
	MinCapacity = 1000
)

// ErrParams marks invalid filter parameters; ErrMismatch an existing filter in Redis built
// with parameters other than the configured ones.
var (
	ErrParams   = errors.New("bloom: invalid parameters")
	ErrMismatch = errors.New("bloom: existing filter has different parameters")
)

// Params are the configured inputs of a filter.
type Params struct {
	Capacity uint64  // n: URLs the filter is sized for
	FPRate   float64 // p: false-positive rate at Capacity insertions
	KeyBits  uint64  // most bits per Redis bitmap key (≤ 2^32, multiple of 8)
}

// Size returns the bit count m and hash count k for capacity n and false-positive rate p.
func Size(n uint64, p float64) (m uint64, k int) { return bloomhash.Size(n, p) }

// Validate checks the parameters and the filter they imply.
func (p Params) Validate() error {
	var errs []error
	if p.Capacity < MinCapacity {
		errs = append(errs, fmt.Errorf("capacity %d: want at least %d", p.Capacity, MinCapacity))
	}
	if !(p.FPRate > 0 && p.FPRate < 1) {
		errs = append(errs, fmt.Errorf("false-positive rate %v: want 0 < p < 1", p.FPRate))
	}
	if p.KeyBits == 0 || p.KeyBits > MaxKeyBits || p.KeyBits%8 != 0 {
		errs = append(errs, fmt.Errorf("key bits %d: want a multiple of 8 in 8..%d", p.KeyBits, uint64(MaxKeyBits)))
	}
	if len(errs) == 0 {
		m, k := Size(p.Capacity, p.FPRate)
		if keys := (m + p.KeyBits - 1) / p.KeyBits; keys > MaxKeys {
			errs = append(errs, fmt.Errorf("%d bits in keys of %d bits need %d keys: want at most %d (raise the key bits)", m, p.KeyBits, keys, MaxKeys))
		}
		if k > MaxK {
			errs = append(errs, fmt.Errorf("false-positive rate %v needs %d hash functions: want at most %d", p.FPRate, k, MaxK))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrParams, err)
	}
	return nil
}

// Filter is a sized Bloom filter bound to its Redis keys. It holds no connection: the
// methods that talk to Redis take the client, so one Filter serves any caller.
type Filter struct {
	Params
	M    uint64 // bits
	K    int    // hash functions
	Keys int    // bitmap keys

	keys []string
	meta string
}

// New sizes a filter whose keys live in the "dedup" keyspace under prefix.
func New(prefix string, p Params) (*Filter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	m, k := Size(p.Capacity, p.FPRate)
	ks := redisx.NewKeyspace(prefix, "dedup")
	f := &Filter{Params: p, M: m, K: k, Keys: int((m + p.KeyBits - 1) / p.KeyBits), meta: ks.Key("bloom", "meta")}
	f.keys = make([]string, f.Keys)
	for j := range f.keys {
		f.keys[j] = ks.Key("bloom", strconv.Itoa(j))
	}
	return f, nil
}

// KeyNames returns the bitmap keys in index order. Scripts expect them as the first
// Keys entries of KEYS. The slice must not be modified.
func (f *Filter) KeyNames() []string { return f.keys }

// MetaKey is the hash holding the filter's parameters.
func (f *Filter) MetaKey() string { return f.meta }

// Bytes is the memory the bitmaps take in Redis.
func (f *Filter) Bytes() uint64 { return (f.M + 7) / 8 }

// Pos is one bit of the filter: an index into KeyNames and a bit offset within that key.
type Pos = bloomhash.Pos

// Positions appends the k bit positions of url to dst.
func (f *Filter) Positions(dst []Pos, url string) []Pos {
	return bloomhash.Positions(dst, url, f.M, f.K, f.KeyBits)
}

// RecordSize is the length of one packed record: the URL's index and its k positions.
func (f *Filter) RecordSize() int { return 4 + 8*f.K }

// AppendRecord appends the packed record the Lua script reads for one URL: a big-endian
// uint32 index (returned by the script when the URL is new) followed by k (key, offset)
// pairs of big-endian uint32. Binary packing keeps ARGV small and lets the script decode
// a record with one struct.unpack call instead of parsing numbers.
func (f *Filter) AppendRecord(dst []byte, index uint32, url string) []byte {
	var buf [MaxK]Pos
	dst = binary.BigEndian.AppendUint32(dst, index)
	for _, p := range f.Positions(buf[:0], url) {
		dst = binary.BigEndian.AppendUint32(dst, p.Key)
		dst = binary.BigEndian.AppendUint32(dst, p.Offset)
	}
	return dst
}

// metaFields are stored in the meta hash and compared at start-up. Every field that changes
// which bits a URL maps to is here.
func (f *Filter) metaFields() []any {
	return []any{
		"n", strconv.FormatUint(f.Capacity, 10),
		"p", strconv.FormatFloat(f.FPRate, 'g', -1, 64),
		"m", strconv.FormatUint(f.M, 10),
		"k", strconv.Itoa(f.K),
		"keys", strconv.Itoa(f.Keys),
		"key_bits", strconv.FormatUint(f.KeyBits, 10),
		"hash", HashVersion,
	}
}

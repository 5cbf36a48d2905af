// Package bloom is the URL-seen set of the dedup service: a scalable Bloom filter kept as
// Redis bitmaps, tested and set for a whole batch of URLs in one Lua call.
//
// # Sizing
//
// The filter is a stack of layers (Almeida et al., "Scalable Bloom Filters"). For a
// configured capacity n, compound false-positive rate p, growth s and tightening ratio r,
// layer i holds n_i = n·s^i URLs at p_i = p·(1−r)·r^i, each sized as a plain filter:
//
//	m_i = ⌈−n_i·ln p_i / (ln 2)²⌉   bits
//	k_i = max(1, round(m_i/n_i · ln 2))   hash functions
//
// The false-positive rate of the whole stack stays below Σ p_i < p however many layers
// there are. The defaults (TRAWL_BLOOM_CAPACITY=10,000,000, TRAWL_BLOOM_FP_RATE=0.01,
// TRAWL_BLOOM_GROWTH=2, TRAWL_BLOOM_TIGHTEN=0.5) give a first layer of m = 110,253,000 bits
// (≈ 13.8 MB) and k = 8; the second layer (20 million URLs at 0.25 %) takes ≈ 30 MB, and
// each further one a little over twice its predecessor.
//
// A layer is full when it has taken n_i new URLs (counted by the test-and-set script in
// the meta hash, so every replica sees one count). The next batch call then stops at a
// message boundary and the caller adds the next layer (Grow) — one atomic script, so of
// several replicas racing exactly one adds it — and carries on. A layer can so take up to
// one message's URLs beyond n_i.
//
// # Hashing
//
// Bit positions come from two 64-bit hashes of the normalised URL (shared/bloomhash:
// XXH64 with two seeds, Kirsch–Mitzenmacher double hashing, exactly mod m_i). HashVersion
// names this scheme and is stored with the filter so that a future change is refused
// instead of mixing two schemes.
//
// # Layout
//
// A Redis string holds at most 2³² bits, so layer i's m_i bits are split over bitmaps
// "<prefix>:{dedup}:bloom:<i>:<j>" of at most KeyBits bits each: position p lives in key
// p / KeyBits at offset p mod KeyBits. Every key shares the {dedup} hash tag, so a script
// touching all of them stays in one Redis Cluster slot. The parameters are stored in
// "<prefix>:{dedup}:bloom:meta", with the layers (see Layer.field) and each layer's count
// of URLs added; Init refuses to run against a filter built with other parameters.
package bloom

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/trawl/trawl/shared/bloomhash"

	"github.com/trawl/trawl/shared/redisx"
)

// HashVersion identifies the hash and position scheme (shared/bloomhash), stored with the
// filter so that a filter built with another scheme is refused.
const HashVersion = bloomhash.Scheme

// Limits that keep one batch call sane. MaxKeys bounds the bitmap keys of one layer;
// MaxK the hash functions of one layer; MaxLayers the stack (with the smallest growth,
// 2, it is 2^32 times the configured capacity).
const (
	MaxKeyBits = 1 << 32 // Redis's string limit is 512 MiB = 2^32 bits
	MaxKeys    = 1024
	MaxK       = 64
	MaxLayers  = bloomhash.MaxLayers
	// MinCapacity keeps the sizing formula away from degenerate tiny filters.
	MinCapacity = 1000
	// MaxGrowth bounds the growth factor: each layer is at most this many times the last.
	MaxGrowth = 16
)

// ErrParams marks invalid filter parameters; ErrMismatch an existing filter in Redis built
// with parameters other than the configured ones.
var (
	ErrParams   = errors.New("bloom: invalid parameters")
	ErrMismatch = errors.New("bloom: existing filter has different parameters")
)

// Params are the configured inputs of a filter.
type Params struct {
	Capacity uint64  // n: URLs the first layer is sized for
	FPRate   float64 // p: false-positive rate of the whole filter, at any size
	KeyBits  uint64  // most bits per Redis bitmap key (≤ 2^32, multiple of 8)
	Growth   int     // s: each layer holds s times the URLs of the one before; 0 = DefaultGrowth
	Tighten  float64 // r: each layer's false-positive rate is r times the one before; 0 = DefaultTighten
	// Parts splits the filter into that many independent sub-filters, each with its own
	// hash tag (Redis Cluster slot) and 1/Parts of the capacity; 0 = 1.
	Parts int
}

// Defaults of the growth parameters (Almeida et al. suggest s = 2 for slowly growing sets
// and r between 0.5 and 0.9; 0.5 costs the first layer 15 % more memory than a plain
// filter of the same p, and each further layer one more hash function).
const (
	DefaultGrowth  = 2
	DefaultTighten = 0.5
)

// withDefaults fills in zero growth parameters.
func (p Params) withDefaults() Params {
	if p.Growth == 0 {
		p.Growth = DefaultGrowth
	}
	if p.Tighten == 0 {
		p.Tighten = DefaultTighten
	}
	if p.Parts == 0 {
		p.Parts = 1
	}
	return p
}

// part returns the parameters of one of p's parts: a plain (one-part) filter for
// ⌈n/parts⌉ URLs at the same false-positive rate. A URL lives in exactly one part, so
// its false-positive rate is its part's, below p, and the bits per URL are the same as
// one filter of n URLs (m is linear in n).
func (p Params) part() Params {
	p = p.withDefaults()
	parts := uint64(p.Parts)
	p.Capacity = (p.Capacity + parts - 1) / parts
	return p
}

// Size returns the bit count m and hash count k for capacity n and false-positive rate p.
func Size(n uint64, p float64) (m uint64, k int) { return bloomhash.Size(n, p) }

// Validate checks the parameters and the first layer they imply.
func (p Params) Validate() error {
	p = p.withDefaults()
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
	if p.Growth < 1 || p.Growth > MaxGrowth {
		errs = append(errs, fmt.Errorf("growth %d: want 1..%d", p.Growth, MaxGrowth))
	}
	if !(p.Tighten > 0 && p.Tighten < 1) {
		errs = append(errs, fmt.Errorf("tightening ratio %v: want 0 < r < 1", p.Tighten))
	}
	if p.Parts < 1 || p.Parts > bloomhash.MaxParts {
		errs = append(errs, fmt.Errorf("parts %d: want 1..%d", p.Parts, bloomhash.MaxParts))
	} else if p.Parts > 1 && p.part().Capacity < MinCapacity {
		errs = append(errs, fmt.Errorf("capacity %d in %d parts: want at least %d per part", p.Capacity, p.Parts, MinCapacity))
	}
	if len(errs) == 0 {
		l := p.part().layer(nil, 0)
		if l.Keys > MaxKeys {
			errs = append(errs, fmt.Errorf("%d bits in keys of %d bits need %d keys: want at most %d (raise the key bits)", l.M, p.KeyBits, l.Keys, MaxKeys))
		}
		if l.K > MaxK {
			errs = append(errs, fmt.Errorf("false-positive rate %v needs %d hash functions: want at most %d", p.FPRate, l.K, MaxK))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrParams, err)
	}
	return nil
}

// Layer is one plain Bloom filter of the stack.
type Layer struct {
	Index int
	N     uint64  // URLs it is sized for
	P     float64 // its false-positive rate at N
	M     uint64  // bits
	K     int     // hash functions
	Keys  int     // bitmap keys

	keyBits uint64
	keys    []string
}

// layer sizes layer i; ks names its keys (nil: no names, for validation only).
func (p Params) layer(ks *redisx.Keyspace, i int) Layer {
	n, pi := bloomhash.LayerSize(p.Capacity, p.FPRate, p.Growth, p.Tighten, i)
	m, k := Size(n, pi)
	l := Layer{Index: i, N: n, P: pi, M: m, K: k, Keys: int((m + p.KeyBits - 1) / p.KeyBits), keyBits: p.KeyBits}
	if ks != nil {
		l.keys = make([]string, l.Keys)
		for j := range l.keys {
			l.keys[j] = bloomhash.BitmapKeyIn(*ks, i, uint64(j))
		}
	}
	return l
}

// KeyNames returns the layer's bitmap keys in index order. The slice must not be modified.
func (l Layer) KeyNames() []string { return l.keys }

// Bytes is the memory the layer's bitmaps take in Redis.
func (l Layer) Bytes() uint64 { return (l.M + 7) / 8 }

// field is how the layer is stored in the meta hash (bloomhash.LayerField, LayerValue).
func (l Layer) field() (name, value string) {
	return bloomhash.LayerField(l.Index), bloomhash.LayerValue(l.N, l.M, l.K, l.Keys)
}

// countField is the meta field counting the URLs added to the layer.
func (l Layer) countField() string { return bloomhash.CountField(l.Index) }

// Filter is a sized scalable Bloom filter bound to its Redis keys. It holds no
// connection: the methods that talk to Redis take the client, so one Filter serves any
// caller. It caches the layers it last read from Redis; a call that finds Redis holding
// more reloads them.
type Filter struct {
	Params
	// Layer is the first layer (M, K, Keys, KeyNames), fixed by the parameters.
	Layer

	prefix string
	ks     redisx.Keyspace
	meta   string
	index  int // which part of Parts

	mu     sync.Mutex
	layers []Layer // as read from Redis; replaced, never modified in place
}

// New sizes a filter whose keys live in the "dedup" keyspace under prefix. With
// p.Parts > 1 it is the first part; NewParts returns them all.
func New(prefix string, p Params) (*Filter, error) {
	parts, err := NewParts(prefix, p)
	if err != nil {
		return nil, err
	}
	return parts[0], nil
}

// NewParts sizes the p.Parts sub-filters of the seen filter. Part i's keys live under
// the hash tag bloomhash.Tag(i, p.Parts); a URL belongs to part bloomhash.Part(url,
// p.Parts) (Parts.Of). With one part this is the filter as it always was: keyspace
// {dedup}, the configured capacity.
func NewParts(prefix string, p Params) (Parts, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p = p.withDefaults()
	pp := p.part()
	out := make(Parts, p.Parts)
	for i := range out {
		ks := bloomhash.PartKeyspace(prefix, i, p.Parts)
		f := &Filter{Params: pp, prefix: prefix, ks: ks, meta: bloomhash.MetaKey(prefix, bloomhash.Tag(i, p.Parts)), index: i}
		f.Layer = pp.layer(&f.ks, 0)
		f.layers = []Layer{f.Layer}
		out[i] = f
	}
	return out, nil
}

// Keyspace is the part's keyspace (one hash tag): its memo keys go there too, so one
// script touches the part's bits and memo in one cluster slot.
func (f *Filter) Keyspace() redisx.Keyspace { return f.ks }

// Index is which part of Parts the filter is.
func (f *Filter) Index() int { return f.index }

// Layers returns the layers as last read from Redis, oldest first. The slice must not be
// modified.
func (f *Filter) Layers() []Layer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.layers
}

// NextLayer sizes the layer that would follow the current ones.
func (f *Filter) NextLayer() Layer {
	return f.Params.layer(&f.ks, len(f.Layers()))
}

// MetaKey is the hash holding the filter's parameters and layers.
func (f *Filter) MetaKey() string { return f.meta }

// StatsKey is the hash where the service publishes the filter's figures for operators
// (see services/dedup/README.md, "Seen test").
func (f *Filter) StatsKey() string { return bloomhash.StatsKey(f.prefix) }

// Bytes is the memory all current layers take in Redis.
func (f *Filter) Bytes() uint64 {
	var b uint64
	for _, l := range f.Layers() {
		b += l.Bytes()
	}
	return b
}

// Pos is one bit of a layer: an index into its KeyNames and a bit offset within that key.
type Pos = bloomhash.Pos

// Positions appends the k bit positions of url in the first layer to dst.
func (f *Filter) Positions(dst []Pos, url string) []Pos {
	return bloomhash.Positions(dst, url, f.M, f.K, f.KeyBits)
}

// Layout is the shape of a batch call: the layers it was built for.
type Layout struct {
	Layers []Layer
	spec   []byte // ARGV describing the layers to the Lua library
	base   []int  // index in KEYS (1-based, after fixed keys) of each layer's first bitmap
	size   int    // bytes of one record
	keys   []string
}

// layout describes layers to a script whose KEYS hold fixed keys first.
func layout(layers []Layer, fixed int) *Layout {
	lo := &Layout{Layers: layers, size: 4}
	lo.spec = binary.BigEndian.AppendUint32(nil, uint32(len(layers)))
	next := fixed + 1
	for _, l := range layers {
		lo.spec = binary.BigEndian.AppendUint32(lo.spec, uint32(l.K))
		// The script adds a position's key index to this base.
		lo.spec = binary.BigEndian.AppendUint32(lo.spec, uint32(next))
		lo.spec = binary.BigEndian.AppendUint32(lo.spec, uint32(l.Keys))
		lo.base = append(lo.base, next)
		lo.keys = append(lo.keys, l.keys...)
		next += l.Keys
		lo.size += (4 + 11) * l.K
	}
	return lo
}

// RecordSize is the most bytes one record takes for this layout.
func (lo *Layout) RecordSize() int { return lo.size }

// AppendRecord appends the packed record the Lua library reads for one URL: a big-endian
// uint32 index (returned by the script when the URL is new) followed, for each layer, by
// its k positions, grouped by key so that the script sets a layer's bits with one
// BITFIELD per key: the key index as a big-endian uint32, the offset in decimal ended by
// a zero byte. The script decodes a record with one struct.unpack call and hands the
// offsets to Redis as they are: a Lua number would be formatted with sprintf on every
// redis.call, which cost a fifth of the script's time.
func (lo *Layout) AppendRecord(dst []byte, index uint32, url string) []byte {
	var buf [MaxK]Pos
	h1, h2 := bloomhash.Hashes(url)
	dst = binary.BigEndian.AppendUint32(dst, index)
	for _, l := range lo.Layers {
		ps := bloomhash.PositionsOf(buf[:0], h1, h2, l.M, l.K, l.keyBits)
		if l.Keys > 1 {
			slices.SortStableFunc(ps, func(a, b Pos) int { return cmp.Compare(a.Key, b.Key) })
		}
		for _, p := range ps {
			dst = binary.BigEndian.AppendUint32(dst, p.Key)
			dst = strconv.AppendUint(dst, uint64(p.Offset), 10)
			dst = append(dst, 0)
		}
	}
	return dst
}

// metaFields are stored in the meta hash and compared at start-up. Every field that changes
// which bits a URL maps to, or how layers are sized, is here.
func (f *Filter) metaFields() []any {
	fields := []any{
		bloomhash.FieldCapacity, strconv.FormatUint(f.Capacity, 10),
		bloomhash.FieldFPRate, strconv.FormatFloat(f.FPRate, 'g', -1, 64),
		bloomhash.FieldGrowth, strconv.Itoa(f.Growth),
		bloomhash.FieldTighten, strconv.FormatFloat(f.Tighten, 'g', -1, 64),
		bloomhash.FieldKeyBits, strconv.FormatUint(f.KeyBits, 10),
		bloomhash.FieldHash, HashVersion,
	}
	if f.Parts > 1 {
		// A filter of one part stores no field for it, as before parts existed. n above
		// is the part's capacity.
		fields = append(fields, bloomhash.FieldParts, strconv.Itoa(f.Parts), bloomhash.FieldPart, strconv.Itoa(f.index))
	}
	return fields
}

// parseLayers reads the layers from the meta hash and checks each against the sizing the
// parameters give, so that bits are never read with another layer's m or k.
func (f *Filter) parseLayers(h map[string]string) ([]Layer, error) {
	n, err := strconv.Atoi(h[bloomhash.FieldLayers])
	if err != nil || n < 1 || n > MaxLayers {
		return nil, fmt.Errorf("%w: %s has layers=%q", ErrMismatch, f.meta, h[bloomhash.FieldLayers])
	}
	out := make([]Layer, n)
	for i := range out {
		l := f.Params.layer(&f.ks, i)
		name, want := l.field()
		if h[name] != want {
			return nil, fmt.Errorf("%w: %s has %s=%q, the parameters give %q", ErrMismatch, f.meta, name, h[name], want)
		}
		out[i] = l
	}
	return out, nil
}

// keyPrefix is the common prefix of the filter's keys, for messages.
func (f *Filter) keyPrefix() string { return strings.TrimSuffix(f.meta, "meta") }

package bloomhash

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Errors of ParseMeta and Reader.PartMeta.
var (
	// ErrNoFilter: the meta hash does not exist (dedup never started with this prefix).
	ErrNoFilter = errors.New("bloom: no filter")
	// ErrScheme: the filter was built with a hash scheme this trawlctl does not know.
	ErrScheme = errors.New("bloom: unknown hash scheme")
	// ErrMeta: the meta hash is incomplete or inconsistent.
	ErrMeta = errors.New("bloom: bad meta")
)

// Meta is the filter's parameters and layers as dedup stores them in
// <prefix>:{<tag>}:bloom:meta (tag from Tag; {dedup} for a filter of one part): the
// part's capacity n, rate p, growth and tightening,
// then "layers" and one "layer:<i>" = "<n> <m> <k> <keys>" per layer, oldest first.
type Meta struct {
	Capacity uint64  `json:"n"`
	FPRate   float64 `json:"p"`
	Growth   int     `json:"growth"`
	Tighten  float64 `json:"tighten"`
	KeyBits  uint64  `json:"key_bits"`
	Hash     string  `json:"hash"`
	Layers   []Layer `json:"layers"`
	// Parts is how many parts the filter was made in (its "parts" field; none = 1).
	Parts int `json:"parts"`
}

// Layer is one plain Bloom filter of the stack.
type Layer struct {
	Capacity uint64 `json:"n"`
	M        uint64 `json:"m"`
	K        int    `json:"k"`
	Keys     int    `json:"keys"`
	Count    uint64 `json:"count"` // URLs dedup has added to it
}

// Positions appends the K bit positions of url in layer l to dst.
func (m Meta) Positions(dst []Pos, l Layer, url string) []Pos {
	return Positions(dst, url, l.M, l.K, m.KeyBits)
}

// ParseMeta checks the fields of a meta hash.
func ParseMeta(h map[string]string) (Meta, error) {
	if len(h) == 0 {
		return Meta{}, ErrNoFilter
	}
	var m Meta
	var errs []error
	u := func(name string) uint64 {
		n, err := strconv.ParseUint(h[name], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q", name, h[name]))
		}
		return n
	}
	f := func(name string) float64 {
		v, err := strconv.ParseFloat(h[name], 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q", name, h[name]))
		}
		return v
	}
	m.Capacity, m.KeyBits, m.Growth = u(FieldCapacity), u(FieldKeyBits), int(u(FieldGrowth))
	m.FPRate, m.Tighten, m.Hash = f(FieldFPRate), f(FieldTighten), h[FieldHash]
	layers := int(u(FieldLayers))
	m.Parts = 1
	if _, ok := h[FieldParts]; ok {
		m.Parts = int(u(FieldParts))
	}
	if err := errors.Join(errs...); err != nil {
		return m, fmt.Errorf("%w: %w", ErrMeta, err)
	}
	if m.Hash != Scheme {
		return m, fmt.Errorf("%w %q (this trawlctl computes %q)", ErrScheme, m.Hash, Scheme)
	}
	if layers < 1 || layers > MaxLayers || m.KeyBits == 0 {
		return m, fmt.Errorf("%w: layers=%d key_bits=%d", ErrMeta, layers, m.KeyBits)
	}
	for i := range layers {
		name := LayerField(i)
		var l Layer
		var err error
		if l.Capacity, l.M, l.K, l.Keys, err = ParseLayerValue(h[name]); err != nil {
			return m, fmt.Errorf("%w: %s=%q", ErrMeta, name, h[name])
		}
		if l.M == 0 || l.K < 1 || l.K > 64 || uint64(l.Keys) != (l.M+m.KeyBits-1)/m.KeyBits {
			return m, fmt.Errorf("%w: %s: m=%d k=%d keys=%d key_bits=%d do not fit together", ErrMeta, name, l.M, l.K, l.Keys, m.KeyBits)
		}
		l.Count, _ = strconv.ParseUint(h[CountField(i)], 10, 64)
		m.Layers = append(m.Layers, l)
	}
	return m, nil
}

// Reader is the seen filter's read-only API: every process but dedup (trawlctl, the
// status page) reads the filter through it and builds no key of its own. It never writes.
type Reader struct {
	c      redis.UniversalClient
	prefix string
	parts  int
}

// OpenReadOnly opens the seen filter of a deployment for reading: its Redis, its key prefix
// (TRAWL_REDIS_PREFIX) and the parts it was made in (TRAWL_BLOOM_PARTS; below 1 means 1).
func OpenReadOnly(c redis.UniversalClient, prefix string, parts int) *Reader {
	return &Reader{c: c, prefix: prefix, parts: max(1, parts)}
}

// Parts is the parts the reader was opened with.
func (r *Reader) Parts() int { return r.parts }

// PartMeta reads and checks the parameters of the part that holds url. key names the
// part's meta hash, for a reader to say where it looked. A Redis error is wrapped; a meta
// hash that is absent, unknown or inconsistent is ParseMeta's error (ErrNoFilter, ErrScheme,
// ErrMeta) as is.
func (r *Reader) PartMeta(ctx context.Context, url string) (m Meta, key string, err error) {
	key = MetaKey(r.prefix, r.tag(url))
	h, err := r.c.HGetAll(ctx, key).Result()
	if err != nil {
		return Meta{}, key, fmt.Errorf("bloom: read %s: %w", key, err)
	}
	m, err = ParseMeta(h)
	return m, key, err
}

// tag is the hash tag of the part that holds url.
func (r *Reader) tag(url string) string { return Tag(Part(url, r.parts), r.parts) }

// Stats reads the figures dedup publishes for operators (StatsKey); empty when it has
// published none.
func (r *Reader) Stats(ctx context.Context) (map[string]string, error) {
	return r.c.HGetAll(ctx, StatsKey(r.prefix)).Result()
}

// Test reports, per layer of the part that holds url (m is that part's, from PartMeta),
// which of url's bits are set (one pipeline of GETBITs for all layers), and whether all
// bits of some layer are: the filter's "seen" answer, which may be a false positive.
func (r *Reader) Test(ctx context.Context, m Meta, url string) (bits [][]bool, seen bool, err error) {
	return m.test(ctx, r.c, r.prefix, r.tag(url), url)
}

func (m Meta) test(ctx context.Context, c redis.Cmdable, prefix, tag, url string) (bits [][]bool, seen bool, err error) {
	cmds := make([][]*redis.IntCmd, len(m.Layers))
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, l := range m.Layers {
			for _, ps := range m.Positions(nil, l, url) {
				cmds[i] = append(cmds[i], p.GetBit(ctx, BitmapKey(prefix, tag, i, uint64(ps.Key)), int64(ps.Offset)))
			}
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("bloom: getbit: %w", err)
	}
	bits = make([][]bool, len(m.Layers))
	for i, cs := range cmds {
		all := true
		for _, cmd := range cs {
			b := cmd.Val() == 1
			bits[i] = append(bits[i], b)
			all = all && b
		}
		seen = seen || all
	}
	return bits, seen, nil
}

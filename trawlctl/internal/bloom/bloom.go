// Package bloom reads the dedup service's URL-seen Bloom filter without changing it.
//
// Bit positions come from shared/bloomhash, the scheme the dedup service sets them with.
// The filter's stored "hash" field names the scheme; any other value is refused.
package bloom

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/trawl/trawl/shared/bloomhash"
)

// HashVersion is the only position scheme this package computes.
const HashVersion = bloomhash.Scheme

// Errors of ReadMeta.
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

// Pos is one bit: bitmap index and offset within it.
type Pos = bloomhash.Pos

// Positions appends the K bit positions of url in layer l to dst.
func (m Meta) Positions(dst []Pos, l Layer, url string) []Pos {
	return bloomhash.Positions(dst, url, l.M, l.K, m.KeyBits)
}

// Tag is the hash tag of the part of a filter split into parts (TRAWL_BLOOM_PARTS) that
// holds url: each part is a filter of its own, with its own meta hash and bitmaps.
func Tag(url string, parts int) string { return bloomhash.Tag(bloomhash.Part(url, parts), parts) }

// MetaKey names a part's meta hash under the deployment prefix (tag from Tag).
func MetaKey(prefix, tag string) string { return bloomhash.MetaKey(prefix, tag) }

// BitmapKey is the name of bitmap j of layer i of a part.
func BitmapKey(prefix, tag string, i int, j uint32) string {
	return bloomhash.BitmapKey(prefix, tag, i, uint64(j))
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
	m.Capacity, m.KeyBits, m.Growth = u(bloomhash.FieldCapacity), u(bloomhash.FieldKeyBits), int(u(bloomhash.FieldGrowth))
	m.FPRate, m.Tighten, m.Hash = f(bloomhash.FieldFPRate), f(bloomhash.FieldTighten), h[bloomhash.FieldHash]
	layers := int(u(bloomhash.FieldLayers))
	m.Parts = 1
	if _, ok := h[bloomhash.FieldParts]; ok {
		m.Parts = int(u(bloomhash.FieldParts))
	}
	if err := errors.Join(errs...); err != nil {
		return m, fmt.Errorf("%w: %w", ErrMeta, err)
	}
	if m.Hash != HashVersion {
		return m, fmt.Errorf("%w %q (this trawlctl computes %q)", ErrScheme, m.Hash, HashVersion)
	}
	if layers < 1 || layers > bloomhash.MaxLayers || m.KeyBits == 0 {
		return m, fmt.Errorf("%w: layers=%d key_bits=%d", ErrMeta, layers, m.KeyBits)
	}
	for i := range layers {
		name := bloomhash.LayerField(i)
		var l Layer
		var err error
		if l.Capacity, l.M, l.K, l.Keys, err = bloomhash.ParseLayerValue(h[name]); err != nil {
			return m, fmt.Errorf("%w: %s=%q", ErrMeta, name, h[name])
		}
		if l.M == 0 || l.K < 1 || l.K > 64 || uint64(l.Keys) != (l.M+m.KeyBits-1)/m.KeyBits {
			return m, fmt.Errorf("%w: %s: m=%d k=%d keys=%d key_bits=%d do not fit together", ErrMeta, name, l.M, l.K, l.Keys, m.KeyBits)
		}
		l.Count, _ = strconv.ParseUint(h[bloomhash.CountField(i)], 10, 64)
		m.Layers = append(m.Layers, l)
	}
	return m, nil
}

// ReadMeta reads and checks the parameters of the part tagged tag.
func ReadMeta(ctx context.Context, c redis.Cmdable, prefix, tag string) (Meta, error) {
	h, err := c.HGetAll(ctx, MetaKey(prefix, tag)).Result()
	if err != nil {
		return Meta{}, fmt.Errorf("bloom: read %s: %w", MetaKey(prefix, tag), err)
	}
	return ParseMeta(h)
}

// Test reports, per layer of the part tagged tag (which must be url's), which of url's
// bits are set (one pipeline of GETBITs for all layers), and whether all bits of some
// layer are: the filter's "seen" answer, which may be a false positive.
func (m Meta) Test(ctx context.Context, c redis.Cmdable, prefix, tag, url string) (bits [][]bool, seen bool, err error) {
	cmds := make([][]*redis.IntCmd, len(m.Layers))
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, l := range m.Layers {
			for _, ps := range m.Positions(nil, l, url) {
				cmds[i] = append(cmds[i], p.GetBit(ctx, BitmapKey(prefix, tag, i, ps.Key), int64(ps.Offset)))
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

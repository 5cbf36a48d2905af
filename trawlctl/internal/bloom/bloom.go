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

// Meta is the filter's parameters as dedup stores them in <prefix>:{dedup}:bloom:meta.
type Meta struct {
	Capacity uint64  `json:"n"`
	FPRate   float64 `json:"p"`
	M        uint64  `json:"m"`
	K        int     `json:"k"`
	Keys     int     `json:"keys"`
	KeyBits  uint64  `json:"key_bits"`
	Hash     string  `json:"hash"`
}

// Pos is one bit: bitmap index and offset within it.
type Pos = bloomhash.Pos

// Positions appends the K bit positions of url to dst.
func (m Meta) Positions(dst []Pos, url string) []Pos {
	return bloomhash.Positions(dst, url, m.M, m.K, m.KeyBits)
}

// MetaKey and BitmapKey name the filter's keys under the deployment prefix.
func MetaKey(prefix string) string { return prefix + ":{dedup}:bloom:meta" }

// BitmapKey is the name of bitmap j.
func BitmapKey(prefix string, j uint32) string {
	return prefix + ":{dedup}:bloom:" + strconv.FormatUint(uint64(j), 10)
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
	m.Capacity, m.M, m.KeyBits = u("n"), u("m"), u("key_bits")
	m.K, m.Keys = int(u("k")), int(u("keys"))
	p, err := strconv.ParseFloat(h["p"], 64)
	if err != nil {
		errs = append(errs, fmt.Errorf("p=%q", h["p"]))
	}
	m.FPRate, m.Hash = p, h["hash"]
	if err := errors.Join(errs...); err != nil {
		return m, fmt.Errorf("%w: %w", ErrMeta, err)
	}
	if m.Hash != HashVersion {
		return m, fmt.Errorf("%w %q (this trawlctl computes %q)", ErrScheme, m.Hash, HashVersion)
	}
	if m.M == 0 || m.K < 1 || m.K > 64 || m.KeyBits == 0 || uint64(m.Keys) != (m.M+m.KeyBits-1)/m.KeyBits {
		return m, fmt.Errorf("%w: m=%d k=%d keys=%d key_bits=%d do not fit together", ErrMeta, m.M, m.K, m.Keys, m.KeyBits)
	}
	return m, nil
}

// ReadMeta reads and checks the filter's parameters.
func ReadMeta(ctx context.Context, c redis.Cmdable, prefix string) (Meta, error) {
	h, err := c.HGetAll(ctx, MetaKey(prefix)).Result()
	if err != nil {
		return Meta{}, fmt.Errorf("bloom: read %s: %w", MetaKey(prefix), err)
	}
	return ParseMeta(h)
}

// Test reports which of url's bits are set (one pipeline of K GETBITs), and whether all
// are: the filter's "seen" answer, which may be a false positive.
func (m Meta) Test(ctx context.Context, c redis.Cmdable, prefix, url string) (bits []bool, seen bool, err error) {
	pos := m.Positions(nil, url)
	cmds := make([]*redis.IntCmd, len(pos))
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, ps := range pos {
			cmds[i] = p.GetBit(ctx, BitmapKey(prefix, ps.Key), int64(ps.Offset))
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("bloom: getbit: %w", err)
	}
	bits = make([]bool, len(pos))
	seen = true
	for i, cmd := range cmds {
		bits[i] = cmd.Val() == 1
		seen = seen && bits[i]
	}
	return bits, seen, nil
}

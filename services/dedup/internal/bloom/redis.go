package bloom

import (
	"context"
	"embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/bloomhash"
	"github.com/trawl/trawl/shared/redisx"
)

//go:embed lua/*.lua
var luaFS embed.FS

// Module is the filter's algorithm as a Lua module (lua/bloom.lua): the scripts of this
// package and the seen package's memoised batch are built on it (redisx.Script).
var Module = redisx.Lua{FS: luaFS, Name: "lua/bloom.lua"}

// presize is the Lua module that allocates a new layer's bitmaps (lua/presize.lua).
var presize = redisx.Lua{FS: luaFS, Name: "lua/presize.lua"}

// The filter's scripts; each file's header gives its KEYS, ARGV and reply.
var (
	tasScript      = redisx.Script(bloomhash.LuaNames, Module, redisx.Lua{FS: luaFS, Name: "lua/tas.lua"})
	containsScript = redisx.Script(bloomhash.LuaNames, Module, redisx.Lua{FS: luaFS, Name: "lua/contains.lua"})
	initScript     = redisx.Script(bloomhash.LuaNames, presize, redisx.Lua{FS: luaFS, Name: "lua/init.lua"})
	growScript     = redisx.Script(bloomhash.LuaNames, presize, redisx.Lua{FS: luaFS, Name: "lua/grow.lua"})
)

// stale is the status a script (lua/tas.lua, lua/contains.lua, the seen package's) returns
// when Redis holds more layers than the call was built for: another replica added one.
// The caller reloads the layers and retries.
const stale = "stale"

// full is the status of a call that stopped because the newest layer reached its
// capacity; the caller adds a layer (Grow) and sends the rest.
const full = "full"

// Call is what one batch call needs of the filter: the layout, and KEYS and ARGV ready
// for a script that has fixed keys first.
type Call struct {
	*Layout
	Keys []string // the fixed keys, then every layer's bitmaps
	Args []any    // spec, newest layer's capacity, its count field
}

// NewCall prepares a script call over the current layers with the given fixed keys, the
// filter's meta key first.
func (f *Filter) NewCall(fixed ...string) Call {
	layers := f.Layers()
	lo := layout(layers, 1+len(fixed))
	keys := make([]string, 0, 1+len(fixed)+len(lo.keys))
	keys = append(append(append(keys, f.meta), fixed...), lo.keys...)
	newest := layers[len(layers)-1]
	capacity := newest.N
	if len(layers) >= MaxLayers {
		// No layer can follow: the last one takes whatever comes.
		capacity = 1 << 62
	}
	return Call{Layout: lo, Keys: keys, Args: []any{lo.spec, capacity, newest.countField()}}
}

// TestAndSet adds urls to the filter and returns the indexes (into urls, ascending) of
// those that were not in it before, in one Redis call unless a layer is added on the way.
// It has no memo: the dedup service uses the seen package, which adds per-message
// idempotency; this is the bare filter for tools, tests and benchmarks. It returns the
// layers it added.
func (f *Filter) TestAndSet(ctx context.Context, c redis.Cmdable, urls []string) ([]int, error) {
	var out []int
	for from, tries := 0, 0; from < len(urls); tries++ {
		if tries > maxTries {
			return nil, fmt.Errorf("bloom: test-and-set: layers kept changing under %d tries", maxTries)
		}
		call := f.NewCall()
		recs := make([]byte, 0, (len(urls)-from)*call.RecordSize())
		for i, u := range urls[from:] {
			recs = call.AppendRecord(recs, uint32(from+i), u)
		}
		v, err := tasScript.Run(ctx, c, call.Keys, append(call.Args, recs)...).Slice()
		if err != nil {
			return nil, fmt.Errorf("bloom: test-and-set %d urls: %w", len(urls)-from, err)
		}
		status, done, idx, err := parseStatus(v)
		if err != nil {
			return nil, fmt.Errorf("bloom: test-and-set: %w", err)
		}
		out = append(out, idx...)
		from += done
		if done > 0 {
			tries = 0
		}
		switch status {
		case stale:
			err = f.Load(ctx, c)
		case full:
			_, err = f.Grow(ctx, c, len(call.Layers))
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// maxTries bounds the calls of one batch that make no progress because layers were added
// meanwhile: each is rare, so many in a row mean something is wrong.
const maxTries = 64

// parseStatus reads {status, done, indexes...}.
func parseStatus(v []any) (status string, done int, idx []int, err error) {
	if len(v) < 2 {
		return "", 0, nil, fmt.Errorf("short reply %v", v)
	}
	status, _ = v[0].(string)
	d, _ := v[1].(int64)
	idx = make([]int, 0, len(v)-2)
	for _, x := range v[2:] {
		n, ok := x.(int64)
		if !ok {
			return "", 0, nil, fmt.Errorf("bad index %v", x)
		}
		idx = append(idx, int(n))
	}
	return status, int(d), idx, nil
}

// Contains reports which urls the filter holds (or false-positively seems to), without
// adding any: the indexes returned are those whose bits are all set in some layer. It
// runs as a read-only script, so it may go to a replica.
func (f *Filter) Contains(ctx context.Context, c redis.Cmdable, urls []string) ([]int, error) {
	if len(urls) == 0 {
		return nil, nil
	}
	for {
		call := f.NewCall()
		recs := make([]byte, 0, len(urls)*call.RecordSize())
		for i, u := range urls {
			recs = call.AppendRecord(recs, uint32(i), u)
		}
		v, err := containsScript.RunRO(ctx, c, call.Keys, append(call.Args, recs)...).Slice()
		if err != nil {
			return nil, fmt.Errorf("bloom: contains %d urls: %w", len(urls), err)
		}
		if s, _ := v[0].(string); s == stale {
			if err := f.Load(ctx, c); err != nil {
				return nil, err
			}
			continue
		}
		out := make([]int, 0, len(v)-1)
		for _, x := range v[1:] {
			n, _ := x.(int64)
			out = append(out, int(n))
		}
		return out, nil
	}
}

// Init makes the filter usable in Redis: it records the parameters of a new filter and
// pre-sizes its first layer, or checks that an existing filter has the same parameters,
// then reads its layers. A mismatch is ErrMismatch: reading a filter with other
// parameters would report seen URLs as new (and the reverse), so the operator must delete
// the keys or restore the settings.
func (f *Filter) Init(ctx context.Context, c redis.Cmdable) error {
	keys := append([]string{f.meta}, f.Layer.keys...)
	name, value := f.Layer.field()
	args := append([]any{strconv.FormatUint(f.KeyBits, 10), strconv.FormatUint(f.M, 10), name, value}, f.metaFields()...)
	v, err := initScript.Run(ctx, c, keys, args...).StringSlice()
	if err != nil {
		return fmt.Errorf("bloom: init %s: %w", f.meta, err)
	}
	if len(v) == 0 {
		return f.Load(ctx, c)
	}
	have := make(map[string]string, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		have[v[i]] = v[i+1]
	}
	want := f.metaFields()
	var diffs []string
	for i := 0; i+1 < len(want); i += 2 {
		name, val := want[i].(string), want[i+1].(string)
		if have[name] != val {
			diffs = append(diffs, fmt.Sprintf("%s=%q (configured %q)", name, have[name], val))
		}
	}
	return fmt.Errorf("%w: %s has %s; delete %s* to start an empty filter, or restore the settings",
		ErrMismatch, f.meta, strings.Join(diffs, ", "), f.keyPrefix())
}

// Load reads the layers from Redis.
func (f *Filter) Load(ctx context.Context, c redis.Cmdable) error {
	h, err := c.HGetAll(ctx, f.meta).Result()
	if err != nil {
		return fmt.Errorf("bloom: read %s: %w", f.meta, err)
	}
	layers, err := f.parseLayers(h)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.layers = layers
	return nil
}

// Grow adds the layer after the first have ones, unless another caller did already, then
// reloads the layers. It reports whether this call added it. Past MaxLayers it adds
// nothing and the newest layer keeps taking URLs beyond its capacity.
func (f *Filter) Grow(ctx context.Context, c redis.Cmdable, have int) (bool, error) {
	if have >= MaxLayers {
		return false, fmt.Errorf("%w: %s has %d layers, the most there may be", ErrParams, f.meta, have)
	}
	l := f.Params.layer(&f.ks, have)
	if l.K > MaxK || l.Keys > MaxKeys {
		return false, fmt.Errorf("%w: layer %d would need k=%d, %d keys", ErrParams, have, l.K, l.Keys)
	}
	name, value := l.field()
	keys := append([]string{f.meta}, l.keys...)
	added, err := growScript.Run(ctx, c, keys, strconv.Itoa(have), strconv.FormatUint(f.KeyBits, 10),
		strconv.FormatUint(l.M, 10), name, value, l.countField()).Bool()
	if err != nil {
		return false, fmt.Errorf("bloom: add layer %d: %w", have, err)
	}
	return added, f.Load(ctx, c)
}

// fillChunk bounds the bytes one BITCOUNT scans, so that measuring a large filter never
// blocks Redis for long.
const fillChunk = 4 << 20

// Pipeliner is the part of a Redis client FillRatio needs.
type Pipeliner interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// FillRatio returns the fraction of the newest layer's bits that are set. It reads every
// byte of the layer (BITCOUNT is O(m)), in chunks, so call it rarely. With fill ratio X the
// layer's false-positive rate is about X^k, and it holds about −(m/k)·ln(1−X) URLs.
func (f *Filter) FillRatio(ctx context.Context, c Pipeliner) (float64, error) {
	layers := f.Layers()
	return f.LayerFill(ctx, c, layers[len(layers)-1])
}

// LayerFill returns the fraction of the layer's bits that are set.
func (f *Filter) LayerFill(ctx context.Context, c Pipeliner, l Layer) (float64, error) {
	var cmds []*redis.IntCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, key := range l.keys {
			bits := min(f.KeyBits, l.M-uint64(j)*f.KeyBits)
			bytes := int64((bits + 7) / 8)
			for start := int64(0); start < bytes; start += fillChunk {
				end := min(start+fillChunk, bytes) - 1
				cmds = append(cmds, p.BitCount(ctx, key, &redis.BitCount{Start: start, End: end}))
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("bloom: bitcount: %w", err)
	}
	var set int64
	for _, cmd := range cmds {
		set += cmd.Val()
	}
	return float64(set) / float64(l.M), nil
}

// Counts returns how many URLs each layer has taken, oldest first.
func (f *Filter) Counts(ctx context.Context, c redis.Cmdable) ([]uint64, error) {
	h, err := c.HGetAll(ctx, f.meta).Result()
	if err != nil {
		return nil, fmt.Errorf("bloom: read %s: %w", f.meta, err)
	}
	layers := f.Layers()
	out := make([]uint64, len(layers))
	for i, l := range layers {
		out[i], _ = strconv.ParseUint(h[l.countField()], 10, 64)
	}
	return out, nil
}

// Stats are the filter's figures as the service publishes them for operators in the hash
// StatsKey, one field each: layers, capacity (URLs the layers are sized for, summed),
// count (URLs added), fill (fraction of the newest layer's bits set), bytes (Redis memory
// of all layers), next_bytes (memory the next layer will take), updated (unix ms).
type Stats struct {
	Layers    int
	Capacity  uint64
	Count     uint64
	Fill      float64
	Bytes     uint64
	NextBytes uint64
}

// ReadStats measures the filter (one BITCOUNT pass over the newest layer).
func (f *Filter) ReadStats(ctx context.Context, c redis.UniversalClient) (Stats, error) {
	counts, err := f.Counts(ctx, c)
	if err != nil {
		return Stats{}, err
	}
	fill, err := f.FillRatio(ctx, c)
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Fill: fill, Bytes: f.Bytes(), NextBytes: f.NextLayer().Bytes()}
	for i, l := range f.Layers() {
		st.Layers++
		st.Capacity += l.N
		if i < len(counts) {
			st.Count += counts[i]
		}
	}
	return st, nil
}

// WriteStats stores st in the hash StatsKey.
func (f *Filter) WriteStats(ctx context.Context, c redis.UniversalClient, st Stats) error {
	err := c.HSet(ctx, f.StatsKey(),
		"layers", st.Layers, "capacity", st.Capacity, "count", st.Count,
		"fill", strconv.FormatFloat(st.Fill, 'f', 4, 64), "bytes", st.Bytes, "next_bytes", st.NextBytes,
		"updated", time.Now().UnixMilli()).Err()
	if err != nil {
		return fmt.Errorf("bloom: write %s: %w", f.StatsKey(), err)
	}
	return nil
}

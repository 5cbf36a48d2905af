package bloom

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// LuaLib defines the local Lua functions of the filter's algorithm, the one place it is
// written; scripts that need them (this package's, the seen package's memoised batch)
// prepend LuaLib to their own body.
//
// bloom_layout(spec) reads a Layout's spec (ARGV) into the list of layers (k, the index
// in KEYS of the first bitmap, the bitmap count, the position of the layer's pairs in a
// record) and the struct format of one record. recs is a string of records built by
// Layout.AppendRecord (one struct.unpack per record).
//
// bloom_tas(recs, L, fmt, room) goes through the records in order. A URL whose bits are
// all set in an older layer is seen (GETBIT up to the first clear bit: about two calls per
// layer for a new URL, nothing written). Otherwise its bits in the newest layer are set
// with BITFIELD SET u1, which returns the old bits: the URL is new when one of them was
// clear. When the newest layer is one bitmap, the SETs of consecutive URLs go in one
// BITFIELD of up to 1024 arguments (bloom_bf holds the constant arguments; only offsets
// are written), in order, so a URL repeated within the batch is new only the first time;
// a layer over several keys sets each URL's bits with one BITFIELD per key. It stops after
// room new URLs and returns the new records' indexes, in order, how many records it went
// through, and whether it went through all.
//
// Profiled on redis-server 7.0 with the AOF on: the script's time went to the per-call
// cost of redis.call (argument conversion, propagation to the AOF, reply parsing) and to
// formatting Lua numbers as arguments, not to the bit operations. One GETBIT/SETBIT call
// per bit cost 14–15 µs of Redis CPU per new URL (k = 7); batched BITFIELD SETs with the
// offsets passed as strings cost 7–8 µs (k = 8). The price: a URL already in the newest
// layer is written again (same bits, but the command reaches the AOF); the in-process
// cache keeps most repeats away from Redis.
//
// bloom_contains(recs, L, fmt) returns the indexes of the records whose bits are all set
// in some layer, writing nothing.
const LuaLib = `
local bloom_bf = {}
for i = 0, 255 do
  bloom_bf[4*i+1], bloom_bf[4*i+2], bloom_bf[4*i+4] = 'SET', 'u1', '1'
end

local function bloom_layout(spec)
  local nl = struct.unpack('>I4', spec)
  local L, at = {}, 2
  for i = 1, nl do
    local k, base, keys = struct.unpack('>I4I4I4', spec, 5 + 12 * (i - 1))
    L[i] = {k = k, base = base, keys = keys, at = at}
    at = at + 2 * k
  end
  local np = (at - 2) / 2
  -- The last value struct.unpack returns is where the next record starts.
  L.next = at
  return L, '>I4' .. string.rep('I4s', np)
end

local function bloom_has(r, l)
  for i = l.at, l.at + 2 * l.k - 1, 2 do
    if redis.call('GETBIT', KEYS[l.base + r[i]], r[i+1]) == 0 then
      return false
    end
  end
  return true
end

local function bloom_set(r, l)
  local clear, n, key = false, 0, r[l.at]
  for i = l.at, l.at + 2 * l.k - 1, 2 do
    if r[i] ~= key then
      local old = redis.call('BITFIELD', KEYS[l.base + key], unpack(bloom_bf, 1, n))
      for j = 1, #old do
        if old[j] == 0 then clear = true end
      end
      n, key = 0, r[i]
    end
    bloom_bf[n+3] = r[i+1]
    n = n + 4
  end
  local old = redis.call('BITFIELD', KEYS[l.base + key], unpack(bloom_bf, 1, n))
  for j = 1, #old do
    if old[j] == 0 then clear = true end
  end
  return clear
end

local function bloom_tas(recs, L, fmt, room)
  local nl, newest = #L, L[#L]
  local k, first, last = newest.k, newest.at + 1, newest.at + 2 * newest.k - 1
  local batched = newest.keys == 1
  local new, n, done, at = {}, 0, 0, 1
  -- URLs whose newest-layer bits wait in bloom_bf (m arguments) for one BITFIELD.
  local pend, pn, m = {}, 0, 0
  local function flush()
    if pn == 0 then return end
    local old = redis.call('BITFIELD', KEYS[newest.base], unpack(bloom_bf, 1, m))
    for u = 1, pn do
      for j = (u - 1) * k + 1, u * k do
        if old[j] == 0 then
          n = n + 1
          new[n] = pend[u]
          break
        end
      end
    end
    pn, m = 0, 0
  end
  while at <= #recs do
    if n + pn >= room or m + 4 * k > #bloom_bf then
      flush()
      if n >= room then break end
    end
    local r = {struct.unpack(fmt, recs, at)}
    at = r[L.next]
    local seen = false
    for li = 1, nl - 1 do
      if bloom_has(r, L[li]) then
        seen = true
        break
      end
    end
    if not seen then
      if batched then
        for i = first, last, 2 do
          bloom_bf[m + 3] = r[i]
          m = m + 4
        end
        pn = pn + 1
        pend[pn] = r[1]
      elseif bloom_set(r, newest) then
        n = n + 1
        new[n] = r[1]
      end
    end
    done = done + 1
  end
  flush()
  return new, done, at > #recs
end

local function bloom_contains(recs, L, fmt)
  local found, n, at = {}, 0, 1
  while at <= #recs do
    local r = {struct.unpack(fmt, recs, at)}
    at = r[L.next]
    for li = 1, #L do
      if bloom_has(r, L[li]) then
        n = n + 1
        found[n] = r[1]
        break
      end
    end
  end
  return found
end
`

// stale is the status a script returns when Redis holds more layers than the call was
// built for: another replica added one. The caller reloads the layers and retries.
const stale = "stale"

// full is the status of a call that stopped because the newest layer reached its
// capacity; the caller adds a layer (Grow) and sends the rest.
const full = "full"

// tasScript: KEYS = meta, then the bitmaps of every layer; ARGV[1] = layout spec,
// ARGV[2] = the newest layer's capacity, ARGV[3] = its count field, ARGV[4] = records.
// Returns {status, records done, new indexes...}.
var tasScript = redis.NewScript(LuaLib + `
local L, fmt = bloom_layout(ARGV[1])
if tonumber(redis.call('HGET', KEYS[1], 'layers')) ~= #L then return {'` + stale + `', 0} end
local count = tonumber(redis.call('HGET', KEYS[1], ARGV[3]) or '0')
local new, done, finished = bloom_tas(ARGV[4], L, fmt, math.max(0, tonumber(ARGV[2]) - count))
if #new > 0 then redis.call('HINCRBY', KEYS[1], ARGV[3], #new) end
local status = 'ok'
if not finished then status = '` + full + `' end
local out = {status, done}
for i = 1, #new do out[i + 2] = new[i] end
return out
`)

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

// containsScript: KEYS = meta, then the bitmaps; ARGV[1] = layout spec, ARGV[4] = records.
var containsScript = redis.NewScript(LuaLib + `
local L, fmt = bloom_layout(ARGV[1])
if tonumber(redis.call('HGET', KEYS[1], 'layers')) ~= #L then return {'` + stale + `'} end
local out = {'ok'}
for i, x in ipairs(bloom_contains(ARGV[4], L, fmt)) do out[i + 1] = x end
return out
`)

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

// presize is the Lua that allocates a layer's bitmaps: writing the last bit allocates the
// whole string now, not by growing it under load. KEYS[first..] are the bitmaps.
const presize = `
local function bloom_presize(first, keybits, m)
  for i = first, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 0 then
      local last = math.min(keybits, m - (i - first) * keybits) - 1
      redis.call('SETBIT', KEYS[i], string.format('%d', last), 0)
    end
  end
end
`

// initScript creates or checks the meta hash and pre-sizes the first layer's bitmaps,
// atomically so that two dedup replicas starting together agree.
//
// KEYS[1] = meta, KEYS[2..] = the first layer's bitmaps; ARGV[1] = key bits, ARGV[2] = m,
// ARGV[3] = the layer's field name, ARGV[4] its value, ARGV[5..] = meta field/value pairs.
// Returns {} when the filter is usable, or the stored meta (field/value list) when it was
// built with other parameters.
var initScript = redis.NewScript(presize + `
local stored = redis.call('HGETALL', KEYS[1])
if #stored == 0 then
  -- Bits without parameters cannot be trusted to mean what this configuration would read.
  for i = 2, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      return redis.error_reply('ERR trawl bloom: bitmap ' .. KEYS[i] .. ' exists but ' .. KEYS[1] .. ' does not')
    end
  end
  redis.call('HSET', KEYS[1], 'layers', 1, ARGV[3], ARGV[4], unpack(ARGV, 5))
else
  local have = {}
  for i = 1, #stored, 2 do have[stored[i]] = stored[i+1] end
  for i = 5, #ARGV, 2 do
    if have[ARGV[i]] ~= ARGV[i+1] then return stored end
  end
end
bloom_presize(2, tonumber(ARGV[1]), tonumber(ARGV[2]))
return {}
`)

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

// growScript adds layer ARGV[1] if the filter has exactly that many layers: of several
// replicas that find the newest layer full at once, one adds the next. KEYS[1] = meta,
// KEYS[2..] = the new layer's bitmaps; ARGV[2] = key bits, ARGV[3] = m, ARGV[4] = the
// layer's field name, ARGV[5] its value, ARGV[6] its count field. Returns 1 if it added
// the layer.
var growScript = redis.NewScript(presize + `
if redis.call('HGET', KEYS[1], 'layers') ~= ARGV[1] then return 0 end
bloom_presize(2, tonumber(ARGV[2]), tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'layers', tonumber(ARGV[1]) + 1, ARGV[4], ARGV[5], ARGV[6], 0)
return 1
`)

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
func (f *Filter) ReadStats(ctx context.Context, c *redis.Client) (Stats, error) {
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
func (f *Filter) WriteStats(ctx context.Context, c *redis.Client, st Stats) error {
	err := c.HSet(ctx, f.StatsKey(),
		"layers", st.Layers, "capacity", st.Capacity, "count", st.Count,
		"fill", strconv.FormatFloat(st.Fill, 'f', 4, 64), "bytes", st.Bytes, "next_bytes", st.NextBytes,
		"updated", time.Now().UnixMilli()).Err()
	if err != nil {
		return fmt.Errorf("bloom: write %s: %w", f.StatsKey(), err)
	}
	return nil
}

package bloom

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// LuaLib defines the local Lua functions bloom_tas(recs, k, kbase) and
// bloom_contains(recs, k, kbase), the one place the filter's algorithm is written. Scripts
// that need them (this package's, the seen package's memoised batch) prepend LuaLib to
// their own body.
//
// recs is a string of records built by AppendRecord (one struct.unpack per record); the
// bitmap with index j is KEYS[kbase + j].
//
// bloom_tas goes through the records in order: GETBIT the k bits up to the first clear
// one; if all are set the URL is seen, else the bits from the first clear one on are set
// and the URL is new. A seen URL costs k GETBITs and writes nothing (nothing reaches the
// AOF or replicas); a new one costs k+1 commands. Processing in order makes a URL repeated
// within the batch new only the first time. Returns the new records' indexes, in order.
//
// Measured alternatives were slower: reading all bits with one BITFIELD_RO per bitmap and
// writing with one BITFIELD (≈1.5× slower for new URLs: BITFIELD parses each GET/SET
// sub-operation at about the cost of a whole GETBIT call, and the script must build the
// argument tables), and batching only the writes through BITFIELD (≈1.15× slower).
//
// bloom_contains returns the indexes of the records whose bits are all set, writing nothing.
const LuaLib = `
local function bloom_check(recs, k)
  local size = 4 + 8 * k
  if #recs % size ~= 0 then
    error('trawl bloom: records of ' .. #recs .. ' bytes are not a multiple of ' .. size)
  end
  return size, '>I4' .. string.rep('I4I4', k)
end

local function bloom_tas(recs, k, kbase)
  local size, fmt = bloom_check(recs, k)
  local new, n = {}, 0
  for at = 1, #recs, size do
    local r = {struct.unpack(fmt, recs, at)}
    local clear = 0
    for i = 1, k do
      if redis.call('GETBIT', KEYS[kbase + r[2*i]], r[2*i+1]) == 0 then
        clear = i
        break
      end
    end
    if clear > 0 then
      for i = clear, k do
        redis.call('SETBIT', KEYS[kbase + r[2*i]], r[2*i+1], 1)
      end
      n = n + 1
      new[n] = r[1]
    end
  end
  return new
end

local function bloom_contains(recs, k, kbase)
  local size, fmt = bloom_check(recs, k)
  local found, n = {}, 0
  for at = 1, #recs, size do
    local r = {struct.unpack(fmt, recs, at)}
    local all = true
    for i = 1, k do
      if redis.call('GETBIT', KEYS[kbase + r[2*i]], r[2*i+1]) == 0 then
        all = false
        break
      end
    end
    if all then
      n = n + 1
      found[n] = r[1]
    end
  end
  return found
end
`

// tasScript: KEYS = the bitmaps; ARGV[1] = k, ARGV[2] = records.
var tasScript = redis.NewScript(LuaLib + `
return bloom_tas(ARGV[2], tonumber(ARGV[1]), 1)
`)

// TestAndSet adds urls to the filter in one Redis call and returns the indexes (into urls,
// ascending) of those that were not in it before. It has no memo: the dedup service uses
// the seen package, which adds per-message idempotency; this is the bare filter for tools,
// tests and benchmarks.
func (f *Filter) TestAndSet(ctx context.Context, c redis.Scripter, urls []string) ([]int, error) {
	if len(urls) == 0 {
		return nil, nil
	}
	recs := make([]byte, 0, len(urls)*f.RecordSize())
	for i, u := range urls {
		recs = f.AppendRecord(recs, uint32(i), u)
	}
	v, err := tasScript.Run(ctx, c, f.keys, f.K, recs).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("bloom: test-and-set %d urls: %w", len(urls), err)
	}
	out := make([]int, len(v))
	for i, n := range v {
		out[i] = int(n)
	}
	return out, nil
}

// containsScript: KEYS = the bitmaps; ARGV[1] = k, ARGV[2] = records.
var containsScript = redis.NewScript(LuaLib + `
return bloom_contains(ARGV[2], tonumber(ARGV[1]), 1)
`)

// Contains reports which urls the filter holds (or false-positively seems to), without
// adding any: the indexes returned are those whose bits are all set. It runs as a
// read-only script, so it may go to a replica.
func (f *Filter) Contains(ctx context.Context, c redis.Scripter, urls []string) ([]int, error) {
	if len(urls) == 0 {
		return nil, nil
	}
	recs := make([]byte, 0, len(urls)*f.RecordSize())
	for i, u := range urls {
		recs = f.AppendRecord(recs, uint32(i), u)
	}
	v, err := containsScript.RunRO(ctx, c, f.keys, f.K, recs).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("bloom: contains %d urls: %w", len(urls), err)
	}
	out := make([]int, len(v))
	for i, n := range v {
		out[i] = int(n)
	}
	return out, nil
}

// initScript creates or checks the meta hash and pre-sizes the bitmaps, atomically so that
// two dedup replicas starting together agree.
//
// KEYS[1] = meta, KEYS[2..] = bitmaps; ARGV[1] = key bits, ARGV[2] = m,
// ARGV[3..] = meta field/value pairs. Returns {} when the filter is usable, or the stored
// meta (field/value list) when it was built with other parameters.
var initScript = redis.NewScript(`
local stored = redis.call('HGETALL', KEYS[1])
if #stored == 0 then
  -- Bits without parameters cannot be trusted to mean what this configuration would read.
  for i = 2, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      return redis.error_reply('ERR trawl bloom: bitmap ' .. KEYS[i] .. ' exists but ' .. KEYS[1] .. ' does not')
    end
  end
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
else
  local have = {}
  for i = 1, #stored, 2 do have[stored[i]] = stored[i+1] end
  for i = 3, #ARGV, 2 do
    if have[ARGV[i]] ~= ARGV[i+1] then return stored end
  end
end
local keybits, m = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    -- Writing the last bit allocates the whole string now, not by growing it under load.
    local last = math.min(keybits, m - (i - 2) * keybits) - 1
    redis.call('SETBIT', KEYS[i], string.format('%d', last), 0)
  end
end
return {}
`)

// Init makes the filter usable in Redis: it records the parameters of a new filter and
// pre-sizes its bitmaps, or checks that an existing filter has the same parameters. A
// mismatch is ErrMismatch: reading a filter with other parameters would report seen URLs
// as new (and the reverse), so the operator must delete the keys or restore the settings.
func (f *Filter) Init(ctx context.Context, c redis.Scripter) error {
	keys := append([]string{f.meta}, f.keys...)
	args := append([]any{strconv.FormatUint(f.KeyBits, 10), strconv.FormatUint(f.M, 10)}, f.metaFields()...)
	v, err := initScript.Run(ctx, c, keys, args...).StringSlice()
	if err != nil {
		return fmt.Errorf("bloom: init %s: %w", f.meta, err)
	}
	if len(v) == 0 {
		return nil
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
		ErrMismatch, f.meta, strings.Join(diffs, ", "), strings.TrimSuffix(f.meta, "meta"))
}

// fillChunk bounds the bytes one BITCOUNT scans, so that measuring a large filter never
// blocks Redis for long.
const fillChunk = 4 << 20

// Pipeliner is the part of a Redis client FillRatio needs.
type Pipeliner interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// FillRatio returns the fraction of the filter's bits that are set. It reads every byte
// (BITCOUNT is O(m)), in chunks, so call it rarely. With fill ratio X the current
// false-positive rate is about X^k, and the filter holds about −(m/k)·ln(1−X) URLs.
func (f *Filter) FillRatio(ctx context.Context, c Pipeliner) (float64, error) {
	var cmds []*redis.IntCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, key := range f.keys {
			bits := min(f.KeyBits, f.M-uint64(j)*f.KeyBits)
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
	return float64(set) / float64(f.M), nil
}

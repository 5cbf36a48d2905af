-- The memoised seen test of a batch of messages (Store.TestAndSet; needs the bloom module,
-- services/dedup/internal/bloom/lua/bloom.lua).
--
-- KEYS = meta, memo hash, memo index, then every layer's bitmaps (bloom.Call).
-- ARGV[1..3] = the call's layout arguments, then per message: id, stream sequence,
-- records, kept. kept is '' or what to keep of each URL should it be new (Message.Keep):
-- a count c, then c headers (the URL's index, the end of its entry in the data: big-endian
-- uint32s, ascending by index), then the data. The memo is the new indexes, followed,
-- when the message keeps something and has new URLs, by '|' and their entries, so that
-- Redis holds them exactly when it holds the bits they were found new by. Returns
-- {status, results...}:
-- per message handled, its new indexes as a comma-separated string, memoised or fresh.
-- Status 'full' means it stopped before the next message that needs the filter because
-- the newest layer is full; 'stale' that Redis has more layers than the call was built
-- for (nothing done).

local L, fmt = bloom_layout(ARGV[1])
if tonumber(redis.call('HGET', KEYS[1], F_LAYERS)) ~= #L then return {'stale'} end
local room = tonumber(ARGV[2]) - tonumber(redis.call('HGET', KEYS[1], ARGV[3]) or '0')
local added = 0
local out = {'ok'}

-- kept_of returns the entries of kept for the indexes new (ascending), concatenated; each
-- is found by binary search over the headers, so a message with many URLs and few new
-- ones costs a few reads.
local function kept_of(kept, new)
  local c = struct.unpack('>I4', kept)
  local base = 4 + 8 * c
  local parts, lo = {}, 1
  for _, idx in ipairs(new) do
    idx = tonumber(idx)
    local hi = c
    while lo <= hi do
      local mid = math.floor((lo + hi) / 2)
      local mi, me = struct.unpack('>I4I4', kept, 4 + 8 * (mid - 1) + 1)
      if mi == idx then
        local s = 0
        if mid > 1 then s = struct.unpack('>I4', kept, 4 + 8 * (mid - 2) + 5) end
        parts[#parts + 1] = string.sub(kept, base + s + 1, base + me)
        lo = mid + 1
        break
      elseif mi < idx then
        lo = mid + 1
      else
        hi = mid - 1
      end
    end
  end
  return table.concat(parts)
end

for i = 4, #ARGV, 4 do
  local id = ARGV[i]
  local memo = redis.call('HGET', KEYS[2], id)
  if memo then
    memo = string.match(memo, '^[^|]*')
  else
    if added >= room then
      out[1] = 'full'
      break
    end
    local new = bloom_tas(ARGV[i + 2], L, fmt, math.huge)
    added = added + #new
    memo = table.concat(new, ',')
    local stored = memo
    if #new > 0 and ARGV[i + 3] ~= '' then stored = memo .. '|' .. kept_of(ARGV[i + 3], new) end
    redis.call('HSET', KEYS[2], id, stored)
    redis.call('ZADD', KEYS[3], ARGV[i + 1], id)
  end
  out[#out + 1] = memo
end
if added > 0 then redis.call('HINCRBY', KEYS[1], ARGV[3], added) end
return out

-- The memoised seen test of a batch of messages (Store.TestAndSet; needs the bloom module,
-- services/dedup/internal/bloom/lua/bloom.lua).
--
-- KEYS = meta, memo hash, memo index, then every layer's bitmaps (bloom.Call).
-- ARGV[1..3] = the call's layout arguments, then per message: id, stream sequence,
-- records. Returns {status, results...}: per message handled, its new indexes as a
-- comma-separated string, memoised or fresh. Status 'full' means it stopped before the
-- next message that needs the filter because the newest layer is full; 'stale' that Redis
-- has more layers than the call was built for (nothing done).

local L, fmt = bloom_layout(ARGV[1])
if tonumber(redis.call('HGET', KEYS[1], F_LAYERS)) ~= #L then return {'stale'} end
local room = tonumber(ARGV[2]) - tonumber(redis.call('HGET', KEYS[1], ARGV[3]) or '0')
local added = 0
local out = {'ok'}
for i = 4, #ARGV, 3 do
  local id = ARGV[i]
  local memo = redis.call('HGET', KEYS[2], id)
  if not memo then
    if added >= room then
      out[1] = 'full'
      break
    end
    local new = bloom_tas(ARGV[i + 2], L, fmt, math.huge)
    added = added + #new
    memo = table.concat(new, ',')
    redis.call('HSET', KEYS[2], id, memo)
    redis.call('ZADD', KEYS[3], ARGV[i + 1], id)
  end
  out[#out + 1] = memo
end
if added > 0 then redis.call('HINCRBY', KEYS[1], ARGV[3], added) end
return out

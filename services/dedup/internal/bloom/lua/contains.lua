-- Which records the filter holds, writing nothing (Filter.Contains; needs bloom.lua). It
-- runs read-only, so it may go to a replica.
--
-- KEYS = meta, then the bitmaps of every layer; ARGV[1] = layout spec, ARGV[4] = records
-- (ARGV[2..3] as for tas.lua, unused). Returns {'ok', indexes...}, or {'stale'} when Redis
-- holds more layers than the call was built for.

local L, fmt = bloom_layout(ARGV[1])
if tonumber(redis.call('HGET', KEYS[1], F_LAYERS)) ~= #L then return {'stale'} end
local out = {'ok'}
for i, x in ipairs(bloom_contains(ARGV[4], L, fmt)) do out[i + 1] = x end
return out

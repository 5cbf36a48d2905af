-- Test-and-set over the layers (Filter.TestAndSet; needs bloom.lua).
--
-- KEYS = meta, then the bitmaps of every layer; ARGV[1] = layout spec, ARGV[2] = the
-- newest layer's capacity, ARGV[3] = its count field, ARGV[4] = records.
-- Returns {status, records done, new indexes...}. Status 'stale': Redis holds more layers
-- than the call was built for (another replica added one), nothing done; the caller
-- reloads the layers and retries. 'full': it stopped because the newest layer reached its
-- capacity; the caller adds a layer (Grow) and sends the rest.

local L, fmt = bloom_layout(ARGV[1])
if tonumber(redis.call('HGET', KEYS[1], F_LAYERS)) ~= #L then return {'stale', 0} end
local count = tonumber(redis.call('HGET', KEYS[1], ARGV[3]) or '0')
local new, done, finished = bloom_tas(ARGV[4], L, fmt, math.max(0, tonumber(ARGV[2]) - count))
if #new > 0 then redis.call('HINCRBY', KEYS[1], ARGV[3], #new) end
local status = 'ok'
if not finished then status = 'full' end
local out = {status, done}
for i = 1, #new do out[i + 2] = new[i] end
return out

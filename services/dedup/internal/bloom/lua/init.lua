-- Creates or checks the meta hash and pre-sizes the first layer's bitmaps (Filter.Init;
-- needs presize.lua), atomically so that two dedup replicas starting together agree.
--
-- KEYS[1] = meta, KEYS[2..] = the first layer's bitmaps; ARGV[1] = key bits, ARGV[2] = m,
-- ARGV[3] = the layer's field name, ARGV[4] its value, ARGV[5..] = meta field/value pairs.
-- Returns {} when the filter is usable, or the stored meta (field/value list) when it was
-- built with other parameters.

local stored = redis.call('HGETALL', KEYS[1])
if #stored == 0 then
  -- Bits without parameters cannot be trusted to mean what this configuration would read.
  for i = 2, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      return redis.error_reply('ERR trawl bloom: bitmap ' .. KEYS[i] .. ' exists but ' .. KEYS[1] .. ' does not')
    end
  end
  redis.call('HSET', KEYS[1], F_LAYERS, 1, ARGV[3], ARGV[4], unpack(ARGV, 5))
else
  local have = {}
  for i = 1, #stored, 2 do have[stored[i]] = stored[i+1] end
  for i = 5, #ARGV, 2 do
    if have[ARGV[i]] ~= ARGV[i+1] then return stored end
  end
end
bloom_presize(2, tonumber(ARGV[1]), tonumber(ARGV[2]))
return {}

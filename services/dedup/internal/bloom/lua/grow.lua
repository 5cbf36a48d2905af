-- Adds layer ARGV[1] if the filter has exactly that many layers (Filter.Grow; needs
-- presize.lua): of several replicas that find the newest layer full at once, one adds the
-- next.
--
-- KEYS[1] = meta, KEYS[2..] = the new layer's bitmaps; ARGV[2] = key bits, ARGV[3] = m,
-- ARGV[4] = the layer's field name, ARGV[5] its value, ARGV[6] its count field. Returns 1
-- if it added the layer.

if redis.call('HGET', KEYS[1], F_LAYERS) ~= ARGV[1] then return 0 end
bloom_presize(2, tonumber(ARGV[2]), tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], F_LAYERS, tonumber(ARGV[1]) + 1, ARGV[4], ARGV[5], ARGV[6], 0)
return 1

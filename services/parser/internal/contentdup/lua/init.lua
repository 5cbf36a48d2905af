-- Records the fingerprint scheme of a new index, or returns the stored one (Index.Init).
--
-- KEYS[1] = meta; ARGV[1] = the scheme this parser computes (simhash.HashVersion).
-- Returns the scheme the index holds: ARGV[1] when it was new.

local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return v

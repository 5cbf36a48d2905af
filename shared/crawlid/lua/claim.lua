-- Creates the crawl identity hash unless it exists, and returns the stored one (Open). One
-- script, so that services starting together agree on one identity.
--
-- KEYS[1] = the identity hash (<prefix>:crawl); ARGV[1] = id, ARGV[2] = created (RFC 3339),
-- ARGV[3] = shards. Returns {id, created, shards} as stored.

if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'created', ARGV[2], 'shards', ARGV[3])
end
return redis.call('HMGET', KEYS[1], 'id', 'created', 'shards')

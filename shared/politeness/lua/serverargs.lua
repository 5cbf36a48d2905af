-- Prelude of the server scripts (server_claim.lua, server_release.lua), which space the
-- requests to one server address across every fetcher and shard.
--
-- KEYS: 1 the address's key, <prefix>:{addr:<ip>}:server (politeness.ServerKey), a hash:
--   until  the claim in flight ends by then (ms); absent: no request in flight
--   tok    the token of that claim
--   next   no request to the address before then (ms)
--   rt     the last response time from the address (ms)
--   host   the host last requested at the address
--   c:<token>  a claim in flight under a connections limit above one: its end (ms)
--   cu     the latest end of those claims
-- ARGV: 1 min delay ms, 2 delay factor k, 3 max crawl-delay ms, 4 retry backoff ms,
--       5 max backoff ms, 6 host, 7 the host's Crawl-delay ms; script arguments start at
--       ARGV[8].
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
-- The frontier's clock: the Redis server's, as in the scheduler's scripts.
local NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local MIND, KF, MAXCD = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local RETRYB, MAXBO = tonumber(ARGV[4]), tonumber(ARGV[5])
local K = KEYS[1]
local H, CD = ARGV[6], tonumber(ARGV[7])
local function n2s(x) return string.format('%.0f', x) end
-- The state outlives its last time by an hour, so that an operator still sees it; it is
-- never needed for correctness after then (an absent key is a free address).
local KEEP = 3600000

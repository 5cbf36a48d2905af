-- Prelude of the claim scripts (claim.lua, release.lua), which act on one host of one
-- frontier shard from outside the scheduler.
--
-- KEYS: 1 inflight, 2 heap, 3 hosts, 4 host:<host>, 5 policy (the shard's generation;
--       frontierkeys.Shard names them).
-- ARGV: 1 min delay ms, 2 delay factor k, 3 max crawl-delay ms, 4 retry backoff ms,
--       5 max backoff ms, 6 host, 7 the host's entry as the claimer resolved it from the
--       rules it watches (frontierkeys.PolicyEntry; '': no rule); script arguments start
--       at ARGV[8].
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
-- The frontier's clock: the Redis server's, as in the scheduler's scripts.
local NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local MIND, KF, MAXCD = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local RETRYB, MAXBO = tonumber(ARGV[4]), tonumber(ARGV[5])
local K_INFLIGHT, K_HEAP, K_HOSTS, K_HOST, K_POLICY = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local H, GO_ENTRY = ARGV[6], ARGV[7]
-- The host's state key, as the policy module reads it (one host per call).
local function hk() return K_HOST end
local function n2s(x) return string.format('%.0f', x) end

-- An idle host's state expires (the scheduler's TRAWL_HOST_STATE_TTL); a next fetch time
-- written here must outlive the time it names, by an hour. An active host's state is
-- persistent and stays so.
local function keep_until(te, existed)
  if redis.call('HEXISTS', K_HOSTS, H) == 1 then return end
  local need = te - NOW + 3600000
  local ttl = redis.call('PTTL', K_HOST)
  if (ttl == -1 and not existed) or (ttl >= 0 and ttl < need) then
    redis.call('PEXPIRE', K_HOST, n2s(need))
  end
end

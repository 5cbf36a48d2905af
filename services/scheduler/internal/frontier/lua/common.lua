-- Prelude shared by every frontier script (prepended in Go before loading).
--
-- The KEYS and ARGV layout is Go's (frontier.go: shardKeys, callArgs, confArgs), declared
-- before this file as the locals it names: KEYS K_STATS … K_PSTATS, then the front queues
-- (fq(p)), then the recrawl outbox when adaptive recrawl keeps it (K_OUTBOX, else nil);
-- ARGV PFX (key prefix "trawl:{s<n>}:"), NOW (now in unix ms; '' = the server's TIME,
-- which is what a scheduler passes), SEED (the random seed), then the settings F, B, BIAS,
-- MIND (min delay ms), KF (delay factor), MAXCD (max crawl-delay ms), MAXBO (max backoff
-- ms), RETRYB (retry backoff base ms), MAXR (max retries), LEASE (lease TTL ms), MAXPH
-- (max pages per host), MAXP (max pages), ROUTE_LIMIT, SHARD, RETIRE (retire after; 0 =
-- never), HOSTTTL (host state TTL ms; 0 = never expires), TOPKEEP (hosts kept in each of
-- busiest and slowest), ERRKEEP (entries kept in errors), BLKEEP (hosts whose backlinks
-- are counted); a script's own arguments start at ARGV[A].
--
-- Per-host keys (bq:<host>, host:<host>) cannot be listed in KEYS because the
-- hosts a step touches are only known inside the script; they are built from the prefix,
-- whose hash tag puts them in the same cluster slot as the declared keys.

-- One clock for every decision about time (due hosts, lease deadlines, next fetch times,
-- backoff, expiry): the Redis server's, never the calling process's. Reading TIME before
-- writing needs effects replication, the only mode since Redis 7 (the default since 5);
-- replicate_commands turns it on in older servers and is a no-op in newer ones.
if redis.replicate_commands then redis.replicate_commands() end
if not NOW then
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local rng = tonumber(SEED)

local function bq(h) return PFX .. 'bq:' .. h end
local function hk(h) return PFX .. 'host:' .. h end
local function pk(h) return PFX .. 'park:' .. h end
-- The active hosts whose limits Go is to resolve (frontierkeys.Shard.Resolve).
local K_RESOLVE = PFX .. 'resolve'
-- Lease slots (frontierkeys.LeaseSlot): a host's k-th task out (k from 0) holds slot
-- "<host>" for k = 0, "<host> <k>" after; its token ends "~<k>" for k ≥ 1.
local function slot_id(h, k)
  if k == 0 then return h end
  return h .. SLOT_SEP .. k
end
local function slot_of(h, tok)
  local k = string.match(tok, TOKEN_SLOT .. '(%d+)$')
  if k then return h .. SLOT_SEP .. k end
  return h
end
local function slot_host(s) return string.match(s, '^[^' .. SLOT_SEP .. ']+') end

-- Numbers are formatted explicitly: tostring would print large ones in exponent form.
local function n2s(x) return string.format('%.0f', x) end

-- In adaptive recrawl mode Go passes one more key after the front queues: the shard's
-- outbox of recrawled URLs that end failed without a page (their host retired, their
-- retries spent). Such a URL's entry carries its recrawl state, which the script would
-- otherwise drop with it; kept here in the same step as "<now ms> <requested 0|1>
-- <entry>", it is scheduled again by Go (service.rescheduleLoop), so a site that is
-- down a while loses no URL. Only entries with an extension can carry state.
local function keep_recrawl(e, requested)
  if K_OUTBOX and string.find(e, '^%d+ %d+ %d+ [^ ]+ [^ ]') then
    redis.call('RPUSH', K_OUTBOX, n2s(NOW) .. ' ' .. requested .. ' ' .. e)
  end
end

-- A host's state (host:<host>) outlives its back queue so that its next fetch time, streaks,
-- budget and retirement hold when it is admitted again, but not forever: when the host gives
-- up its back queue the hash expires HOSTTTL after the host's next fetch time, and the
-- router makes it persistent again on admission, so an active host never loses its state.
-- Hosts are only written while active, so release and admission are the only places.
local function expire_state(h, te)
  if HOSTTTL > 0 then
    local ttl = HOSTTTL
    if te > NOW then ttl = ttl + (te - NOW) end
    redis.call('PEXPIRE', hk(h), n2s(ttl))
  end
end

-- Park-Miller LCG: products stay below 2^53, so doubles compute it exactly. Seeded from Go
-- because math.random in Redis scripts is deterministic per call.
local function rand()
  rng = (rng * 16807) % 2147483647
  return rng / 2147483647
end

-- Entry: "<depth> <hops> <attempt> <url>".
local function parse(e)
  local d, hp, a, u = string.match(e, '^(%d+) (%d+) (%d+) (.*)$')
  if not d then return nil end
  return d, hp, tonumber(a), u
end

-- hostof mirrors url.URL.Hostname for the normalised URLs the frontier accepts; its Go
-- twin is urlnorm.HostOf, and Go checks it against urlnorm.Host before a URL is queued
-- (Frontier.admissible).
local function hostof(u)
  local s = string.find(u, '://', 1, true)
  if not s then return nil end
  local rest = string.sub(u, s + 3)
  local e = string.find(rest, '[/?#]')
  local auth = rest
  if e then auth = string.sub(rest, 1, e - 1) end
  local at = string.match(auth, '^.*()@')
  if at then auth = string.sub(auth, at + 1) end
  if string.sub(auth, 1, 1) == '[' then
    local close = string.find(auth, ']', 2, true)
    if not close then return nil end
    auth = string.sub(auth, 2, close - 1)
  else
    local c = string.find(auth, ':', 1, true)
    if c then auth = string.sub(auth, 1, c - 1) end
  end
  if auth == '' then return nil end
  return string.lower(auth)
end

-- Counter deltas are buffered and written once per script.
local STAT_NAMES = {'accepted', 'queued', 'fetched', 'failed', 'disallowed', 'out_of_scope',
  'over_budget', 'dispatched', 'pages', 'expired', 'retired', 'parked', 'slots_out'}
local delta = {}
for _, n in ipairs(STAT_NAMES) do delta[n] = 0 end
local function bump(name, n) delta[name] = delta[name] + n end
-- Hosts whose park list (park:<host>) changed in this script → the scope of the rule that
-- parked them (true: unknown): their entry in parked, "<reason> <entries>[ <scope>]", is
-- rewritten once, with the other counters.
local parkTouched = {}
-- Per-rule counters (policy-stats, "<scope>\t<counter>"), buffered like the others.
local ruleDelta = {}
local function rule_bump(scope, counter, n)
  if not scope or n == 0 then return end
  local f = scope .. '\t' .. counter
  ruleDelta[f] = (ruleDelta[f] or 0) + n
end
local function rules_bump(scopes, counter, n)
  for _, sc in ipairs(scopes) do rule_bump(sc, counter, n) end
end
-- Queued URLs a step ends without a request (over budget: the router's, a spent host's or
-- domain's back queue; failed: the back queue of a host it retires) are moved to the
-- shard's skip spool (frontierkeys.Shard.SkipSpool), where Go lists them on the skip log:
-- gathered here by reason (spooled[why]; '' over budget, ' retired') and pushed with the
-- counters, as items of at most 256 entries "<now ms> <seed> <i><why>\n<entry>\n<entry>…",
-- so a step costs one push per 256.
local spooled = {}
local function spool(why, e)
  local t = spooled[why]
  if not t then
    t = {}
    spooled[why] = t
  end
  t[#t + 1] = e
end
local function flush_stats()
  for why, t in pairs(spooled) do
    for i = 1, #t, 256 do
      redis.call('RPUSH', PFX .. 'skip-spool', n2s(NOW) .. ' ' .. SEED .. ' ' .. i .. why .. '\n' ..
        table.concat(t, '\n', i, math.min(i + 255, #t)))
    end
  end
  spooled = {}
  for f, n in pairs(ruleDelta) do
    if n ~= 0 then redis.call('HINCRBY', K_PSTATS, f, n) end
  end
  ruleDelta = {}
  for h, sc in pairs(parkTouched) do
    local n = redis.call('LLEN', pk(h))
    if n > 0 then
      if sc == true then
        -- Parked without a rule's name (a fetcher's parked outcome): the list keeps the
        -- rule it had.
        local old = redis.call('HGET', K_PARKED, h)
        sc = old and string.match(old, '^[^ ]+ %d+ (.+)$')
      end
      local v = PARK_BLOCKED .. ' ' .. n
      if sc then v = v .. ' ' .. sc end
      redis.call('HSET', K_PARKED, h, v)
    else
      redis.call('HDEL', K_PARKED, h)
    end
  end
  parkTouched = {}
  for _, n in ipairs(STAT_NAMES) do
    if delta[n] ~= 0 then
      redis.call('HINCRBY', K_STATS, n, delta[n])
      delta[n] = 0
    end
  end
end

-- Pages charged against the global budget, including this script's unflushed delta.
local pages_base = nil
local function pages_used()
  if pages_base == nil then
    pages_base = tonumber(redis.call('HGET', K_STATS, 'pages') or '0')
  end
  return pages_base + delta['pages']
end

-- spool_queue drops host h's back queue for reason why (spool), e (already popped) first,
-- into the skip spool; it returns how many entries the queue held besides e.
local function spool_queue(h, e, why)
  if e then spool(why, e) end
  local rest = redis.call('LRANGE', bq(h), 0, -1)
  if #rest == 0 then return 0 end
  redis.call('DEL', bq(h))
  for _, x in ipairs(rest) do spool(why, x) end
  return #rest
end

-- Variadic commands in chunks: unpack has a small stack limit. Chunks are even so that
-- field/value and score/member pairs stay together.
local function bulk(cmd, key, args)
  local n = #args
  local i = 1
  while i <= n do
    local j = i + 999
    if j > n then j = n end
    redis.call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
end

-- HMGET of any number of fields, in chunks like bulk; a missing field is nil.
local function hmget(key, fields)
  local out = {}
  for i = 1, #fields, 1000 do
    local r = redis.call('HMGET', key, unpack(fields, i, math.min(i + 999, #fields)))
    for j = 1, #r do out[i + j - 1] = r[j] or nil end
  end
  return out
end


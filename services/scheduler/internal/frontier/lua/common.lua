-- Prelude shared by every frontier script (prepended in Go before loading).
--
-- KEYS: 1 stats, 2 heap, 3 hosts, 4 inflight, 5 lease, 6 paused, 7 seq, 8 backlinks,
--       9 busiest, 10 slowest, 11 errors, 12 applied, 13 lasterr, 14.. fq:0..fq:F-1,
--       14+F recrawl-outbox (adaptive recrawl only; K_OUTBOX)
-- ARGV: 1 key prefix "trawl:{s<n>}:", 2 now (unix ms; '' = the server's TIME, which is
--       what a scheduler passes), 3 random seed, 4 F, 5 B, 6 bias,
--       7 min delay ms, 8 delay factor k, 9 max crawl-delay ms, 10 max backoff ms,
--       11 retry backoff base ms, 12 max retries, 13 lease TTL ms, 14 max pages per host,
--       15 max pages, 16 router limit, 17 shard, 18 retire after (0 = never),
--       19 host state TTL ms (0 = never expires), 20 hosts kept in each of busiest and
--       slowest, 21 entries kept in errors, 22 hosts whose backlinks are counted; script
--       arguments start at ARGV[23].
--
-- Per-host keys (bq:<host>, host:<host>) cannot be listed in KEYS because the
-- hosts a step touches are only known inside the script; they are built from the prefix,
-- whose hash tag puts them in the same cluster slot as the declared keys.

local K_STATS, K_HEAP, K_HOSTS, K_INFLIGHT = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_LEASE, K_PAUSED, K_SEQ, K_BACKLINKS = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local K_BUSIEST, K_SLOWEST, K_ERRORS, K_APPLIED = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local K_LASTERR = KEYS[13]
local PFX = ARGV[1]
-- One clock for every decision about time (due hosts, lease deadlines, next fetch times,
-- backoff, expiry): the Redis server's, never the calling process's. Reading TIME before
-- writing needs effects replication, the only mode since Redis 7 (the default since 5);
-- replicate_commands turns it on in older servers and is a no-op in newer ones.
if redis.replicate_commands then redis.replicate_commands() end
local NOW = tonumber(ARGV[2])
if not NOW then
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local rng = tonumber(ARGV[3])
local F = tonumber(ARGV[4])
local B = tonumber(ARGV[5])
local BIAS = tonumber(ARGV[6])
local MIND = tonumber(ARGV[7])
local KF = tonumber(ARGV[8])
local MAXCD = tonumber(ARGV[9])
local MAXBO = tonumber(ARGV[10])
local RETRYB = tonumber(ARGV[11])
local MAXR = tonumber(ARGV[12])
local LEASE = tonumber(ARGV[13])
local MAXPH = tonumber(ARGV[14])
local MAXP = tonumber(ARGV[15])
local ROUTE_LIMIT = tonumber(ARGV[16])
local SHARD = ARGV[17]
local RETIRE = tonumber(ARGV[18])
local HOSTTTL = tonumber(ARGV[19])
local TOPKEEP = tonumber(ARGV[20])
local ERRKEEP = tonumber(ARGV[21])
local BLKEEP = tonumber(ARGV[22])
local A = 23

local function fq(p) return KEYS[14 + p] end
local function bq(h) return PFX .. 'bq:' .. h end
local function hk(h) return PFX .. 'host:' .. h end

-- Numbers are formatted explicitly: tostring would print large ones in exponent form.
local function n2s(x) return string.format('%.0f', x) end

-- In adaptive recrawl mode Go passes one more key after the front queues: the shard's
-- outbox of recrawled URLs that end failed without a page (their host retired, their
-- retries spent). Such a URL's entry carries its recrawl state, which the script would
-- otherwise drop with it; kept here in the same step as "<now ms> <requested 0|1>
-- <entry>", it is scheduled again by Go (service.rescheduleLoop), so a site that is
-- down a while loses no URL. Only entries with an extension can carry state.
local K_OUTBOX = KEYS[14 + F]
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

-- hostof mirrors url.URL.Hostname for the normalised URLs the frontier accepts; Go checks
-- the two agree before a URL is queued (frontier.luaHost).
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
  'over_budget', 'dispatched', 'pages', 'expired', 'retired'}
local delta = {}
for _, n in ipairs(STAT_NAMES) do delta[n] = 0 end
local function bump(name, n) delta[name] = delta[name] + n end
local function flush_stats()
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

local WEIGHT = {}
for p = 0, F - 1 do WEIGHT[p] = BIAS ^ p end

-- entry_host returns the host of a queue entry. The common case (no userinfo, port or IPv6
-- literal) is one pattern match; the rest takes hostof.
local function entry_host(e)
  local auth = string.match(e, '^%d+ %d+ %d+ [%a][%w+.-]*://([^/?#]*)')
  if not auth then return nil end
  if string.find(auth, '[@%[:]') then
    local _, _, _, u = parse(e)
    return u and hostof(u)
  end
  if auth == '' then return nil end
  return string.lower(auth)
end

-- pick_queue draws a non-empty front queue with weight bias^p; -1 if all are empty.
local function pick_queue(lens)
  local sum = 0
  for p = 0, F - 1 do
    if lens[p] > 0 then sum = sum + WEIGHT[p] end
  end
  if sum == 0 then return -1 end
  local r = rand() * sum
  local pick = -1
  for p = 0, F - 1 do
    if lens[p] > 0 then
      pick = p
      r = r - WEIGHT[p]
      if r < 0 then break end
    end
  end
  return pick
end

-- route is Mercator's front-to-back router. While fewer than B hosts hold a back queue it
-- moves front-queue heads, picking queue p with weight bias^p among the non-empty ones:
-- a URL of an active host joins that host's back queue, a URL of a new host claims a free
-- back queue and enters the heap at max(now, its stored next time); a URL of a retired
-- host ends as failed, and one of a host over its page budget as over budget, without a
-- back queue. It stops when every back queue is taken (the next new host waits at the head
-- of its front queue) or after ROUTE_LIMIT entries, which bounds the script's run time.
--
-- To keep Redis calls per URL low it works in chunks: it draws the queue sequence for a
-- chunk, pops each queue's share with one LPOP count, looks all their hosts up with one
-- HMGET, processes the entries in draw order, and pushes any it did not get to back onto
-- the heads of their queues in their original order.
local function route()
  local nh = redis.call('HLEN', K_HOSTS)
  if nh >= B then return 0 end
  local lens, total = {}, 0
  for p = 0, F - 1 do
    local n = redis.call('LLEN', fq(p))
    lens[p] = n
    total = total + n
  end
  if total == 0 then return 0 end
  local known = {}
  -- The stored state of a host about to be admitted, read once per call: its next fetch
  -- time, and whether it has a hash (which then must not expire while it is active).
  local newNext, newStored = {}, {}
  local function admission(h)
    if MAXP > 0 and pages_used() >= MAXP then return 'over' end
    if newNext[h] then return 'new' end
    local r = redis.call('HMGET', hk(h), 'next', 'retired', 'pages')
    -- Retired while its URLs waited in the front queues, or its budget was spent.
    if r[2] then return 'retired' end
    if MAXPH > 0 and (tonumber(r[3] or '0') or 0) >= MAXPH then return 'over' end
    local nxt = tonumber(r[1] or '0') or 0
    if nxt < NOW then nxt = NOW end
    newNext[h] = nxt
    newStored[h] = r[1] or r[3]
    return 'new'
  end
  local hostArgs, heapArgs = {}, {}
  local moved = 0
  local blocked = false
  while not blocked and moved < ROUTE_LIMIT and total > 0 and nh < B do
    -- Entries of active hosts need no slot, so draw somewhat more than the free slots;
    -- what is not routed goes back, so a chunk far larger than needed is wasted work.
    local c = 2 * (B - nh) + 2
    if c > ROUTE_LIMIT - moved then c = ROUTE_LIMIT - moved end
    if c > 512 then c = 512 end
    local draw, cnt, left = {}, {}, {}
    for p = 0, F - 1 do left[p] = lens[p] end
    for k = 1, c do
      local p = pick_queue(left)
      if p < 0 then break end
      draw[k] = p
      cnt[p] = (cnt[p] or 0) + 1
      left[p] = left[p] - 1
    end
    local popped, pos = {}, {}
    for p = 0, F - 1 do
      if cnt[p] then
        popped[p] = redis.call('LPOP', fq(p), cnt[p]) or {}
        pos[p] = 1
      end
    end
    -- Hosts of the chunk, and which of them hold a back queue, in one call.
    local hostOf, ask = {}, {}
    for p, es in pairs(popped) do
      local hs = {}
      hostOf[p] = hs
      for j = 1, #es do
        local h = entry_host(es[j])
        hs[j] = h or false
        if h and known[h] == nil then
          known[h] = 'ask'
          ask[#ask + 1] = h
        end
      end
    end
    if #ask > 0 then
      local r = redis.call('HMGET', K_HOSTS, unpack(ask))
      for j = 1, #ask do
        if r[j] then known[ask[j]] = 'active' else known[ask[j]] = 'new' end
      end
    end
    for k = 1, #draw do
      local p = draw[k]
      local e = popped[p][pos[p]]
      if e == nil then break end
      local h = hostOf[p][pos[p]]
      local state = h and known[h]
      if state == 'new' then
        -- A new host's URL may end without a back queue (retired host, spent budget), so
        -- that is settled before it may block the front queue.
        state = admission(h)
        if state ~= 'new' then known[h] = state end
      end
      if state == 'new' and nh >= B then
        blocked = true
        break
      end
      pos[p] = pos[p] + 1
      lens[p] = lens[p] - 1
      total = total - 1
      moved = moved + 1
      if not h then
        -- Only a hand-edited entry can get here; it is accounted, not lost.
        bump('queued', -1)
        bump('out_of_scope', 1)
      elseif state == 'active' then
        redis.call('RPUSH', bq(h), e)
      elseif state == 'over' then
        bump('queued', -1)
        bump('over_budget', 1)
      elseif state == 'retired' then
        bump('queued', -1)
        bump('failed', 1)
        keep_recrawl(e, 0)
      else
        if newStored[h] then redis.call('PERSIST', hk(h)) end
        redis.call('RPUSH', bq(h), e)
        hostArgs[#hostArgs + 1] = h
        hostArgs[#hostArgs + 1] = '1'
        heapArgs[#heapArgs + 1] = n2s(newNext[h])
        heapArgs[#heapArgs + 1] = h
        known[h] = 'active'
        nh = nh + 1
      end
    end
    -- Put back what this chunk popped but did not route, keeping queue order.
    for p, es in pairs(popped) do
      if pos[p] <= #es then
        local back = {}
        for j = #es, pos[p], -1 do back[#back + 1] = es[j] end
        bulk('LPUSH', fq(p), back)
      end
    end
  end
  bulk('HSET', K_HOSTS, hostArgs)
  bulk('ZADD', K_HEAP, heapArgs)
  return moved
end

-- The status page's views are bounded: the top hosts keep TOPKEEP members (the lowest
-- scores go), the error log ERRKEEP entries (the oldest go). Each script trims once, after
-- all its writes, so the extra cost per outcome stays O(log n).
local function trim_top(k)
  local n = redis.call('ZCARD', k)
  if n > TOPKEEP then redis.call('ZREMRANGEBYRANK', k, 0, n - TOPKEEP - 1) end
end
-- top_floor is the lowest score of a full view, or nil while it has room.
local function top_floor(k)
  if redis.call('ZCARD', k) < TOPKEEP then return nil end
  local r = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  return tonumber(r[2])
end
local function log_errors(entries)
  if #entries > 0 then
    bulk('LPUSH', K_ERRORS, entries)
    redis.call('LTRIM', K_ERRORS, 0, ERRKEEP - 1)
  end
end

-- lease_error is the error a fetcher last reported for the task out under token on host h
-- (lasterr, frontierkeys.NoteLeaseError), or nil.
local function lease_error(h, tok)
  local v = redis.call('HGET', K_LASTERR, h)
  if not v then return nil end
  local t, e = string.match(v, '^([^\t]*)\t%d+\t%d+\t%d+\t(.*)$')
  if t == tok then return e end
  return nil
end

-- exhausted is the reason of a URL that failed because its attempts ran out (att is the
-- attempt of the one that just ended, counting from 0), followed by what ended the last.
local function exhausted(att, text)
  return 'attempts exhausted after ' .. n2s(att + 1) .. ' attempts: ' .. text
end

-- Releases the back queues of hosts that have nothing left, then refills them.
local function free_and_route(freed)
  if #freed > 0 then
    bulk('HDEL', K_HOSTS, freed)
    route()
  end
end

-- The frontier's shared steps (the router and the helpers of several scripts), loaded after
-- common.lua and the politeness modules, whose functions they call.

-- A host's page budget: its live policy's host_budget, else TRAWL_MAX_PAGES_PER_HOST (0:
-- none). Pages are charged to host:<host> pages while a budget applies to the host
-- (charge_host), so a budget set mid-crawl counts the pages fetched from then on; the
-- other hosts pay no write per page.
local function host_budget(h)
  local b = host_limits(h).budget
  if b == nil then return MAXPH end
  return b
end
local function charge_host(h) return MAXPH > 0 or host_budget(h) > 0 end

-- Parking. A host a live policy blocks (host_limits(h).block) is never dispatched: its
-- queued URLs move, in queue order, to the end of its park list (park:<host>), counted in
-- stats as parked rather than queued, and its back queue is freed. park_entries appends
-- entries; park_queue moves the host's whole back queue (a RENAME when there is no park
-- list yet); park_host also takes an idle host out of the heap and frees its back queue (a
-- host with a task out keeps its slot until the outcome, which parks what comes back).
-- Unblocking moves the list back to the front queues (resume.lua).
local function note_park(h, n)
  local by = host_limits(h).block_by
  if host_limits(h).block and by then
    rule_bump(by, PSTAT.BLOCKED, n)
    rule_bump(by, PSTAT.PARKED, n)
    parkTouched[h] = by
  elseif not parkTouched[h] then
    parkTouched[h] = true
  end
end
local function park_entries(h, es)
  if #es == 0 then return end
  bulk('RPUSH', pk(h), es)
  bump('parked', #es)
  note_park(h, #es)
end
local function park_queue(h)
  local n = redis.call('LLEN', bq(h))
  if n == 0 then return 0 end
  if redis.call('EXISTS', pk(h)) == 0 then
    redis.call('RENAME', bq(h), pk(h))
  else
    while true do
      local es = redis.call('LPOP', bq(h), 1000)
      if not es then break end
      bulk('RPUSH', pk(h), es)
    end
  end
  bump('queued', -n)
  bump('parked', n)
  note_park(h, n)
  return n
end
local function park_host(h)
  local n = park_queue(h)
  if redis.call('ZREM', K_HEAP, h) == 1 then
    -- In the heap with a task out (several connections): its last outcome frees it.
    if slots_out(h, redis.call('HGET', hk(h), HF.SLOTS)) then return n, false end
    redis.call('HDEL', K_HOSTS, h)
    local nx = tonumber(redis.call('HGET', hk(h), HF.NEXT) or '0') or 0
    expire_state(h, nx)
    return n, true
  end
  return n, false
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
  -- The host table holds the active hosts and WIDE (frontierkeys.Wide), which is none and
  -- is written with the first host the table gets.
  local wide = redis.call('HEXISTS', K_HOSTS, WIDE)
  local nh = redis.call('HLEN', K_HOSTS) - wide
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
  -- time and whether it has a hash (which then must not expire while it is active).
  local newNext, newStored = {}, {}
  local function admission(h)
    if newNext[h] then
      if MAXP > 0 and pages_used() >= MAXP then return 'over' end
      return 'new'
    end
    local r = redis.call('HMGET', hk(h), HF.NEXT, HF.RETIRED, HF.PAGES, HF.LIM)
    local lim = stored_limits(h, r[4])
    if lim.block then return 'parked' end
    if MAXP > 0 and pages_used() >= MAXP then return 'over' end
    -- Retired while its URLs waited in the front queues, or its budget was spent.
    if r[2] then return 'retired' end
    -- Stale limits (stored under older rules, or none) decide nothing here: the dispatch
    -- hands the host to Go to resolve before it is leased, and applies its budget then.
    local hb = host_budget(h)
    if not lim.stale and hb > 0 and (tonumber(r[3] or '0') or 0) >= hb then return 'over' end
    local nxt = tonumber(r[1] or '0') or 0
    if nxt < NOW then nxt = NOW end
    newNext[h] = nxt
    newStored[h] = r[1] or r[3] or r[4]
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
        local h = ask[j]
        if not r[j] then
          known[h] = 'new'
        elseif host_limits(h).block then
          -- Its queue goes to the park list first, so the park list keeps queue order.
          local _, freed = park_host(h)
          if freed then nh = nh - 1 end
          known[h] = 'parked'
        else
          known[h] = 'active'
        end
      end
    end
    for k = 1, #draw do
      local p = draw[k]
      local e = popped[p][pos[p]]
      if e == nil then break end
      local h = hostOf[p][pos[p]]
      local state = h and known[h]
      if state == 'new' then
        -- A new host's URL may end without a back queue (blocked, retired host, spent
        -- budget), so that is settled before it may block the front queue.
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
      elseif state == 'parked' then
        bump('queued', -1)
        park_entries(h, {e})
      elseif state == 'over' then
        bump('queued', -1)
        bump('over_budget', 1)
        spool('', e)
      elseif state == 'retired' then
        bump('queued', -1)
        bump('failed', 1)
        keep_recrawl(e, 0)
        spool(' retired', e)
      else
        if newStored[h] then redis.call('PERSIST', hk(h)) end
        if host_limits(h).stale then
          -- Counted under its rules once Go has resolved them (limits.lua).
          redis.call('HSET', K_RESOLVE, h, '1')
        else
          rules_bump(host_limits(h).rules, PSTAT.HOSTS, 1)
        end
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
  if #hostArgs > 0 and wide == 0 then
    hostArgs[#hostArgs + 1] = WIDE
    hostArgs[#hostArgs + 1] = WIDE_VALUE
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

-- lease_error is the error a fetcher last reported for the task out under token in lease
-- slot sid (lasterr, frontierkeys.NoteLeaseError), or nil.
local function lease_error(sid, tok)
  local v = redis.call('HGET', K_LASTERR, sid)
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

-- Tasks out on lease slots after a host's first (stats slots_out), read once per script.
-- Only a host whose policy allows several connections takes those slots, so while there
-- are none, a host allowed one connection has no task out but the one in its first slot
-- and its slots need no reading; a host whose connections were lowered with tasks out
-- keeps the count above 0 until they end.
local extra_base = nil
local function extra_out()
  if extra_base == nil then
    extra_base = tonumber(redis.call('HGET', K_STATS, 'slots_out') or '0') or 0
  end
  return extra_base + delta['slots_out']
end
-- slot_ended counts the end of the task out in lease slot sid of host h. A host one of
-- whose later slots ended in this script may still have a task out in another (its
-- connections lowered meanwhile), though the count may now be 0: its slots are read.
local ended_extra = {}
local function slot_ended(h, sid)
  if sid ~= h then
    bump('slots_out', -1)
    ended_extra[h] = true
  end
end
-- slots_busy counts the tasks of host h out, besides the slots in done (ended in this
-- script), and finds the first slot of its connections free (-1: none). It reads its
-- slots only when it may have more than one task out (several connections, some task of
-- the shard out on a slot after its host's first, or one of h's later slots ended in this
-- script), else counts 0 and gives the first slot. It reads them over the host's
-- slot_span (hw: its HF.SLOTS as the caller read it, false when absent; nil: read here)
-- and, once no task is out beyond its connections, brings the mark down to them, so the
-- next reads are no wider: one write per lowering (marking the slots actually held would
-- write whenever the highest one ended).
local function slots_busy(h, lim, done, hw)
  if not (lim.conn > 1 or extra_out() > 0 or ended_extra[h] == true) then return 0, 0 end
  if hw == nil then hw = redis.call('HGET', hk(h), HF.SLOTS) end
  local ids, ks = {}, {}
  for j = 0, slot_span(lim, hw) - 1 do
    local sid = slot_id(h, j)
    if not done[sid] then
      ids[#ids + 1] = sid
      ks[#ks + 1] = j
    end
  end
  local n, k, tail = 0, -1, false
  local r = #ids > 0 and redis.call('ZMSCORE', K_INFLIGHT, unpack(ids)) or {}
  for j = 1, #ids do
    if r[j] then
      n = n + 1
      tail = tail or ks[j] >= lim.conn
    elseif k < 0 and ks[j] < lim.conn then
      k = ks[j]
    end
  end
  if not tail and (tonumber(hw or '0') or 0) > lim.conn then
    if lim.conn > 1 then
      redis.call('HSET', hk(h), HF.SLOTS, lim.conn)
    else
      redis.call('HDEL', hk(h), HF.SLOTS)
    end
  end
  return n, k
end

-- requeue_host puts host h, whose task just ended with URLs still queued, back in the heap
-- at te, unless as many other tasks of it are out as it may have (the last of them puts
-- it back). With several connections it may be in the heap already: a later time stays.
local function requeue_host(h, te, lim, others, heapArgs)
  if others >= lim.conn then return end
  if others > 0 or lim.conn > 1 then
    redis.call('ZADD', K_HEAP, 'GT', n2s(te), h)
  else
    heapArgs[#heapArgs + 1] = n2s(te)
    heapArgs[#heapArgs + 1] = h
  end
end

-- Releases the back queues of hosts that have nothing left, then refills them.
local function free_and_route(freed)
  if #freed > 0 then
    bulk('HDEL', K_HOSTS, freed)
    -- With several connections a host may be in the heap while a task of it ends.
    bulk('ZREM', K_HEAP, freed)
    route()
  end
end

-- Dispatch. ARGV[A]: most tasks to hand out.
-- Returns {deadline, pending, host1, token1, entry1, host2, ...}; {} when paused. pending
-- is how many active hosts wait for Go to resolve their limits (K_RESOLVE): a host whose
-- stored limits are stale is not leased but handed to Go, which puts it back in the heap
-- with its limits (limits.lua).
--
-- A host whose live policy allows connections N > 1 takes the first free lease slot
-- (slot_id), and while it has another slot free and URLs queued it stays in the heap, due
-- again 1/N of one connection's cycle (the last response time and the gap after it) after
-- this dispatch: starts are spaced start to start, so the host gets N times the rate one
-- connection gives it, and never more than N requests in flight. With one connection
-- nothing changes: the host leaves the heap until its outcome, which sets its next time a
-- gap after the request's end.
if redis.call('EXISTS', K_PAUSED) == 1 then return {} end
local MAX = tonumber(ARGV[A])
route()
local hs = redis.call('ZRANGEBYSCORE', K_HEAP, '-inf', n2s(NOW), 'LIMIT', 0, MAX)
local deadline = NOW + LEASE
local out = {deadline, 0}
local function pending()
  if policy_any() then out[2] = redis.call('HLEN', K_RESOLVE) end
end
if #hs == 0 then
  pending()
  flush_stats()
  return out
end
bulk('ZREM', K_HEAP, hs)
-- Each due host's first lease slot: one left in the heap with a task out there (it had
-- several connections, lowered or removed since) must not take that slot again.
local held0 = hmget(K_LEASE, hs)
local freed = {}
local th, te, tslot = {}, {}, {}
local again = {}
for i, h in ipairs(hs) do
  local lim = host_limits(h)
  if lim.stale then
    -- Active under older rules: Go resolves its limits and puts it back in the heap.
    redis.call('HSETNX', K_RESOLVE, h, '0')
  else
    local blocked = lim.block
    local e = not blocked and redis.call('LPOP', bq(h))
    -- The lease slot: the first free of the host's connections, none when as many tasks as
    -- it may have are out, counted over its slot_span, which covers the slots a higher
    -- limit, lowered since, let it take (slots_busy). A host with one connection whose
    -- slots need no reading may still have a task out in its first (held0).
    -- With several connections the next start needs the host's Crawl-delay and last
    -- response time: read with its mark of slots (st).
    local k, busy, st = 0, 0, nil
    if e then
      if lim.conn > 1 then st = redis.call('HMGET', hk(h), HF.SLOTS, HF.CD, HF.RT) end
      busy, k = slots_busy(h, lim, {}, st and st[1])
      if busy == 0 and held0[i] then busy, k = 1, -1 end
      if busy >= lim.conn or k < 0 then
        -- Its tasks out end first; the last outcome puts the host back in the heap.
        redis.call('LPUSH', bq(h), e)
        e = nil
      end
    end
    if e == nil then
      -- Waiting for a slot: still active, neither in the heap nor freed.
    elseif blocked then
      -- Blocked since it was queued: parked, never dispatched.
      park_queue(h)
      freed[#freed + 1] = h
      expire_state(h, NOW)
    elseif not e then
      -- A host in the heap always has a queued URL; repair rather than wedge if not.
      freed[#freed + 1] = h
      expire_state(h, NOW)
    else
      local over = MAXP > 0 and pages_used() >= MAXP
      local hb = host_budget(h)
      if not over and charge_host(h) then
        if redis.call('HINCRBY', hk(h), HF.PAGES, 1) > hb and hb > 0 then
          redis.call('HINCRBY', hk(h), HF.PAGES, -1)
          over = true
        end
      end
      if over then
        -- The host's whole queue is over budget: spool it for the skip log and free the
        -- back queue.
        local rest = spool_queue(h, e, '')
        bump('queued', -(rest + 1))
        bump('over_budget', rest + 1)
        freed[#freed + 1] = h
        expire_state(h, NOW)
      else
        if lim.conn > 1 then
          -- The next start is 1/N of a request and its gap after this one, whichever slot
          -- ends first.
          local rt = tonumber(st[3] or '0') or 0
          local nx = n2s(NOW + (rt + gap(tonumber(st[2] or '0') or 0, rt, lim)) / lim.conn)
          if k > 0 and k + 1 > (tonumber(st[1] or '0') or 0) then
            -- A slot above its mark: raised with the write the next start makes anyway.
            redis.call('HSET', hk(h), HF.NEXT, nx, HF.SLOTS, k + 1)
          else
            redis.call('HSET', hk(h), HF.NEXT, nx)
          end
          if busy + 1 < lim.conn and redis.call('LLEN', bq(h)) > 0 then
            again[#again + 1] = nx
            again[#again + 1] = h
          end
        end
        th[#th + 1] = h
        te[#te + 1] = e
        tslot[#tslot + 1] = k
        bump('pages', 1)
        rules_bump(lim.rules, PSTAT.REQUESTS, 1)
      end
    end
  end
end
local n = #th
if n > 0 then
  local last = redis.call('INCRBY', K_SEQ, n)
  local leaseArgs, inflightArgs = {}, {}
  local dl = n2s(deadline)
  for j = 1, n do
    -- The call's random nonce keeps tokens unique even if Redis loses its last writes
    -- (AOF everysec) and seq runs again: a reused token would make JetStream drop the new
    -- task (and its page and outcome) as duplicates of the lost dispatch's messages.
    local tok = SHARD .. '-' .. n2s(last - n + j) .. '-' .. SEED
    if tslot[j] > 0 then
      tok = tok .. TOKEN_SLOT .. tslot[j]
      bump('slots_out', 1)
    end
    local sid = slot_id(th[j], tslot[j])
    leaseArgs[#leaseArgs + 1] = sid
    leaseArgs[#leaseArgs + 1] = tok .. ' ' .. te[j]
    inflightArgs[#inflightArgs + 1] = dl
    inflightArgs[#inflightArgs + 1] = sid
    out[#out + 1] = th[j]
    out[#out + 1] = tok
    out[#out + 1] = te[j]
  end
  bulk('HSET', K_LEASE, leaseArgs)
  bulk('ZADD', K_INFLIGHT, inflightArgs)
  bump('queued', -n)
  bump('dispatched', n)
end
bulk('ZADD', K_HEAP, again)
free_and_route(freed)
pending()
flush_stats()
return out

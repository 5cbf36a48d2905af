-- Dispatch. ARGV[A]: most tasks to hand out.
-- Returns {deadline, host1, token1, entry1, host2, ...}; {} when paused.
if redis.call('EXISTS', K_PAUSED) == 1 then return {} end
local MAX = tonumber(ARGV[A])
route()
local hs = redis.call('ZRANGEBYSCORE', K_HEAP, '-inf', n2s(NOW), 'LIMIT', 0, MAX)
local deadline = NOW + LEASE
local out = {deadline}
if #hs == 0 then
  flush_stats()
  return out
end
bulk('ZREM', K_HEAP, hs)
local freed = {}
local th, te = {}, {}
for _, h in ipairs(hs) do
  local blocked = host_limits(h).block
  local e = not blocked and redis.call('LPOP', bq(h))
  if blocked then
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
    if not over and MAXPH > 0 then
      if redis.call('HINCRBY', hk(h), 'pages', 1) > MAXPH then
        redis.call('HINCRBY', hk(h), 'pages', -1)
        over = true
      end
    end
    if over then
      -- The host's whole queue is over budget: drop it and free the back queue.
      local rest = redis.call('LLEN', bq(h))
      if rest > 0 then redis.call('DEL', bq(h)) end
      bump('queued', -(rest + 1))
      bump('over_budget', rest + 1)
      freed[#freed + 1] = h
      expire_state(h, NOW)
    else
      th[#th + 1] = h
      te[#te + 1] = e
      bump('pages', 1)
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
    local tok = SHARD .. '-' .. n2s(last - n + j) .. '-' .. ARGV[3]
    leaseArgs[#leaseArgs + 1] = th[j]
    leaseArgs[#leaseArgs + 1] = tok .. ' ' .. te[j]
    inflightArgs[#inflightArgs + 1] = dl
    inflightArgs[#inflightArgs + 1] = th[j]
    out[#out + 1] = th[j]
    out[#out + 1] = tok
    out[#out + 1] = te[j]
  end
  bulk('HSET', K_LEASE, leaseArgs)
  bulk('ZADD', K_INFLIGHT, inflightArgs)
  bump('queued', -n)
  bump('dispatched', n)
end
free_and_route(freed)
flush_stats()
return out

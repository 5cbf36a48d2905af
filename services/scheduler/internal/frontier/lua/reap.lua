-- Reap. ARGV[A]: most leases to reap; ARGV[A+1]: cutoff (ms, the Redis clock): leases whose
-- deadline is at or before it are reaped. Each expired lease's URL goes back to the head of
-- its host queue with attempt+1 (failed past the retry limit, so a URL that kills
-- fetchers ends), and the host is re-armed at
-- now + max(min delay, capped crawl-delay, k x its last response time), each the host's
-- own when a live policy sets it (host_limits): the fetcher may
-- have reached the host just before the deadline.
-- Each expiry is logged in errors with kind lease-expired, like a failed outcome, with the
-- last error its fetcher reported for the task (lasterr), if any; a URL whose attempts ran
-- out fails with "attempts exhausted after N attempts: …".
-- Returns {reaped, requeued, failed}.
local limit = tonumber(ARGV[A])
local cutoff = tonumber(ARGV[A + 1])
local hs = redis.call('ZRANGEBYSCORE', K_INFLIGHT, '-inf', n2s(cutoff), 'LIMIT', 0, limit)
if #hs == 0 then return {0, 0, 0} end
local heapArgs, freed = {}, {}
local requeued, failed = 0, 0
local errLines = {}
local done = {}
for _, sid in ipairs(hs) do
  local h = slot_host(sid)
  done[sid] = true
  local v = redis.call('HGET', K_LEASE, sid)
  local sp = v and string.find(v, ' ', 1, true)
  local back = false
  if sp then
    slot_ended(h, sid)
    local d, hp, att, u = parse(string.sub(v, sp + 1))
    local r = 'failed'
    local why = 'no outcome before the lease deadline'
    local le = lease_error(sid, string.sub(v, 1, sp - 1))
    if le then why = why .. '; last error: ' .. le end
    if d and att + 1 <= MAXR then
      redis.call('LPUSH', bq(h), d .. ' ' .. hp .. ' ' .. n2s(att + 1) .. ' ' .. u)
      bump('queued', 1)
      requeued = requeued + 1
      back = true
      r = 'retry'
    else
      bump('failed', 1)
      failed = failed + 1
      keep_recrawl(string.sub(v, sp + 1), 0)
      why = exhausted(att or 0, why)
    end
    -- Queued URLs are normalised ASCII, so cutting bytes cannot split a character; an
    -- entry's extension follows its URL after a space and is not part of it.
    errLines[#errLines + 1] = n2s(NOW) .. '\t' .. r .. '\tlease-expired\t0\t' .. h .. '\t' ..
      string.sub(string.match(u or '', '^[^ ]*'), 1, 512) .. '\t' .. why
  end
  local st = redis.call('HMGET', hk(h), HF.CD, HF.RT, HF.SLOTS, HF.LIM)
  local lim = pol_cache[h] or stored_limits(h, st[4])
  local te = NOW + gap(tonumber(st[1] or '0') or 0, tonumber(st[2] or '0') or 0, lim)
  redis.call('HSET', hk(h), HF.NEXT, n2s(te))
  local others = slots_busy(h, lim, done, st[3])
  if lim.block then
    park_queue(h)
    redis.call('ZREM', K_HEAP, h)
    if others == 0 then
      freed[#freed + 1] = h
      expire_state(h, te)
    end
  elseif back or redis.call('EXISTS', bq(h)) == 1 then
    requeue_host(h, te, lim, others, heapArgs)
  elseif others == 0 then
    freed[#freed + 1] = h
    expire_state(h, te)
  end
end
bulk('HDEL', K_LEASE, hs)
bulk('HDEL', K_LASTERR, hs)
bulk('ZREM', K_INFLIGHT, hs)
bulk('ZADD', K_HEAP, heapArgs)
bump('expired', #hs)
log_errors(errLines)
free_and_route(freed)
flush_stats()
return {#hs, requeued, failed}

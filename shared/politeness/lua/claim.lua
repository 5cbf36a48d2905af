-- Claim. ARGV[8]: the window, ms. Reserves the host for one request made outside its
-- queue (a robots.txt redirect to another host) so that the request keeps the host's gap,
-- as a task of the host would: it succeeds only when no task of the host is out (in any of
-- its lease slots, when it has several connections) and the
-- host's next fetch time has come. The host's next fetch time (and its heap score, when it
-- has a queue) then moves to the end of the window, so no task of the host is dispatched
-- before Release sets the real next time; a claimer that dies leaves the host waiting out
-- the window, never early.
-- Returns {1, until}: claimed until that time (ms), which Release needs; or {0, wait}: the
-- host is busy, try again in wait ms.
local window = tonumber(ARGV[8])
local lim = claim_limits()
local st = redis.call('HMGET', K_HOST, HF.NEXT, HF.CD, HF.RT, HF.SLOTS)
local dl = slots_out(H, st[4])
if dl then
  -- A task is out: its outcome sets the next time. Ask again after about one gap, and no
  -- later than the lease's deadline.
  local w = gap(tonumber(st[2] or '0') or 0, tonumber(st[3] or '0') or 0, lim)
  if w < 1000 then w = 1000 end
  if NOW + w > tonumber(dl) then w = tonumber(dl) - NOW end
  if w < 1 then w = 1 end
  return {0, n2s(w)}
end
local nxt = tonumber(st[1] or '0') or 0
if nxt > NOW then return {0, n2s(nxt - NOW)} end
local existed = redis.call('EXISTS', K_HOST) == 1
local til = NOW + window
redis.call('HSET', K_HOST, HF.NEXT, n2s(til))
redis.call('ZADD', K_HEAP, 'XX', n2s(til), H)
keep_until(til, existed)
return {1, n2s(til)}

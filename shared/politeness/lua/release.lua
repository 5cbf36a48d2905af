-- Release. ARGV[8]: the claim's until (ms); ARGV[9]: how long the request took (ms; -1 =
-- no request was made). Ends a claim: the host's next fetch time becomes now + gap(its
-- Crawl-delay, the response time), or, with no request, what it was before is unknown, so
-- now + gap(Crawl-delay, 0). A claim overtaken by something else (its window ran out and
-- the host's time was set anew) only ever moves the time later.
-- Returns the host's next fetch time (ms).
local til, dur = tonumber(ARGV[8]), tonumber(ARGV[9])
if dur < 0 then dur = 0 end
local st = redis.call('HMGET', K_HOST, HF.NEXT, HF.CD)
local nxt = tonumber(st[1] or '0') or 0
local te = NOW + gap(tonumber(st[2] or '0') or 0, dur, claim_limits())
local existed = redis.call('EXISTS', K_HOST) == 1
if nxt == til then
  redis.call('HSET', K_HOST, HF.NEXT, n2s(te))
  redis.call('ZADD', K_HEAP, 'XX', n2s(te), H)
else
  if nxt > te then te = nxt end
  redis.call('HSET', K_HOST, HF.NEXT, n2s(te))
  redis.call('ZADD', K_HEAP, 'XX', 'GT', n2s(te), H)
end
keep_until(te, existed)
return n2s(te)

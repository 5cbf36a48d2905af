-- Release. ARGV[8]: how long the request took (ms; -1: no request was made); ARGV[9]: the
-- claim's token. The address's next time becomes now + gap(the host's Crawl-delay, the
-- response time), or stays later if it already was. A claim overtaken by another (its
-- window ran out) still spaces the next request, but leaves the other claim in flight.
-- Without a request the claim is only ended: nothing was spent.
-- Returns the address's next time (ms).
local took, tok = tonumber(ARGV[8]), ARGV[9]
local st = redis.call('HMGET', K, 'tok', 'next', 'until')
if took < 0 then
  if st[1] == tok then redis.call('HDEL', K, 'until', 'tok') end
  return n2s(tonumber(st[2] or '0') or 0)
end
local te = NOW + gap(CD, took, base_limits())
local nxt = tonumber(st[2] or '0') or 0
if nxt > te then te = nxt end
local keep = te
if st[1] == tok then
  redis.call('HDEL', K, 'until', 'tok')
else
  local til = tonumber(st[3] or '0') or 0
  if til > keep then keep = til end
end
redis.call('HSET', K, 'next', n2s(te), 'rt', n2s(took), 'host', H)
redis.call('PEXPIRE', K, n2s(keep - NOW + KEEP))
return n2s(te)

-- Release. ARGV[8]: how long the request took (ms; -1: no request was made); ARGV[9]: the
-- claim's token. The address's next time becomes now + gap(the host's Crawl-delay, the
-- response time), or stays later if it already was. A claim overtaken by another (its
-- window ran out) still spaces the next request, but leaves the other claim in flight.
-- Without a request the claim is only ended: nothing was spent.
-- Returns the address's next time (ms).
local took, tok = tonumber(ARGV[8]), ARGV[9]
local ck = 'c:' .. tok
if redis.call('HEXISTS', K, ck) == 1 then
  -- One of several claims in flight (a connections limit): its start already moved the
  -- next time; the release frees its place and records the response time.
  redis.call('HDEL', K, ck)
  local cu = 0
  local all = redis.call('HGETALL', K)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'c:' then
      local u = tonumber(all[i + 1]) or 0
      if u > NOW then
        if u > cu then cu = u end
      else
        redis.call('HDEL', K, all[i])
      end
    end
  end
  if cu > 0 then redis.call('HSET', K, 'cu', n2s(cu)) else redis.call('HDEL', K, 'cu') end
  if took >= 0 then redis.call('HSET', K, 'rt', n2s(took), 'host', H) end
  local s2 = redis.call('HMGET', K, 'next', 'until')
  local nxt = tonumber(s2[1] or '0') or 0
  local keep = nxt
  if cu > keep then keep = cu end
  local til = tonumber(s2[2] or '0') or 0
  if til > keep then keep = til end
  if keep < NOW then keep = NOW end
  redis.call('PEXPIRE', K, n2s(keep - NOW + KEEP))
  return n2s(nxt)
end
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

-- Claim. ARGV[8]: the window, ms (the request's cut-off); ARGV[9]: the claim's token;
-- ARGV[10]: the most requests in flight at the address (connections; 1 when absent).
-- With one connection, succeeds only when no request to the address is in flight and its
-- next time has come; the address is then in flight (until, tok) until the window ends or
-- Release, whichever is first, so a claimer that dies holds the address for the window
-- and no longer. With more (a site policy's connections), the claims in flight are the
-- fields c:<token> (each its window's end; cu the latest end): a claim succeeds while
-- fewer are in flight and the next time has come, and moves the next time a gap past its
-- own start, so requests start at least a gap apart, start to start.
-- Returns {1, until}; or {0, wait}: the address is busy, try again in wait ms.
local window, tok = tonumber(ARGV[8]), ARGV[9]
local conns = tonumber(ARGV[10] or '1') or 1
local st = redis.call('HMGET', K, 'until', 'next', 'rt', 'cu')
local til = tonumber(st[1] or '0') or 0
local cu = tonumber(st[4] or '0') or 0
local rt = tonumber(st[3] or '0') or 0
local n, first = 0, 0 -- claims in flight, and the earliest end among them
if til > NOW then n, first = 1, til end
if cu > NOW then
  local all = redis.call('HGETALL', K)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'c:' then
      local u = tonumber(all[i + 1]) or 0
      if u > NOW then
        n = n + 1
        if first == 0 or u < first then first = u end
      else
        redis.call('HDEL', K, all[i])
      end
    end
  end
end
if n >= conns then
  -- A request is out: it should end in about the last response time, and the gap
  -- follows. Never later than the claim's end, when the address is free anyway.
  local w = rt + gap(CD, rt, base_limits())
  if w < 50 then w = 50 end
  if NOW + w > first then w = first - NOW end
  if w < 1 then w = 1 end
  return {0, n2s(w)}
end
local nxt = tonumber(st[2] or '0') or 0
if nxt > NOW then return {0, n2s(nxt - NOW)} end
til = NOW + window
if conns <= 1 then
  redis.call('HSET', K, 'until', n2s(til), 'tok', tok, 'host', H)
else
  redis.call('HSET', K, 'c:' .. tok, n2s(til), 'host', H, 'next', n2s(NOW + gap(CD, rt, base_limits())))
end
if til > cu then
  if conns > 1 then redis.call('HSET', K, 'cu', n2s(til)) end
  cu = til
end
redis.call('PEXPIRE', K, n2s(cu - NOW + KEEP))
return {1, n2s(til)}

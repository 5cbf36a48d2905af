-- Claim. ARGV[8]: the window, ms (the request's cut-off); ARGV[9]: the claim's token.
-- Succeeds only when no request to the address is in flight and its next time has come;
-- the address is then in flight until the window ends or Release, whichever is first, so
-- a claimer that dies holds the address for the window and no longer.
-- Returns {1, until}; or {0, wait}: the address is busy, try again in wait ms.
local window, tok = tonumber(ARGV[8]), ARGV[9]
local st = redis.call('HMGET', K, 'until', 'next', 'rt')
local til = tonumber(st[1] or '0') or 0
if til > NOW then
  -- A request is out: it should end in about the last response time, and the gap
  -- follows. Never later than the claim's end, when the address is free anyway.
  local rt = tonumber(st[3] or '0') or 0
  local w = rt + gap(CD, rt, base_limits())
  if w < 50 then w = 50 end
  if NOW + w > til then w = til - NOW end
  if w < 1 then w = 1 end
  return {0, n2s(w)}
end
local nxt = tonumber(st[2] or '0') or 0
if nxt > NOW then return {0, n2s(nxt - NOW)} end
til = NOW + window
redis.call('HSET', K, 'until', n2s(til), 'tok', tok, 'host', H)
redis.call('PEXPIRE', K, n2s(window + KEEP))
return {1, n2s(til)}

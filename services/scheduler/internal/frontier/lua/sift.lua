-- Sift. ARGV[A]: host; ARGV[A+1]: n; then n pairs: entry, action. The entries are the last
-- n of the host's park list as Go read them; the call applies only if they still are (else
-- -1: Go reads again). Action 'r' resumes the entry (no rule in force blocks its URL any
-- more: a URL-prefix block was removed or narrowed while another still covers the host),
-- 'k' keeps it parked. The kept entries move to the head of the park list and the resumed
-- ones to the head of front queue 0, each in their order, so a pass over the list from its
-- end, chunk by chunk, leaves the kept entries in their order and puts the resumed ones
-- ahead of newer URLs in theirs, as resume.lua does with a whole list.
-- Returns {the number resumed, the list's length after}; {-1, 0} when the list moved,
-- {-2, 0} when the table blocks the host.
local h, n = ARGV[A], tonumber(ARGV[A + 1])
if host_limits(h).block then return {-2, 0} end
local cur = redis.call('LRANGE', pk(h), -n, -1)
if #cur ~= n then return {-1, 0} end
for j = 1, n do
  if cur[j] ~= ARGV[A + 2 * j] then return {-1, 0} end
end
redis.call('LTRIM', pk(h), 0, -(n + 1))
-- LPUSH puts each of its arguments ahead of the one before, so both go last first.
local keep, res = {}, {}
for j = n, 1, -1 do
  local e = ARGV[A + 2 * j]
  if ARGV[A + 2 * j + 1] == 'r' then
    res[#res + 1] = e
  else
    keep[#keep + 1] = e
  end
end
bulk('LPUSH', pk(h), keep)
local old = redis.call('HGET', K_PARKED, h)
local by = old and string.match(old, '^[^ ]+ %d+ (.+)$')
parkTouched[h] = by or true
if #res > 0 then
  rule_bump(by, PSTAT.PARKED, -#res)
  bulk('LPUSH', fq(0), res)
  bump('parked', -#res)
  bump('queued', #res)
end
flush_stats()
return {#res, redis.call('LLEN', pk(h))}

-- Resume. ARGV[A]: host; ARGV[A+1]: most entries to move. When the live policy no longer
-- blocks the host, moves up to that many entries from the end of its park list to the head
-- of front queue 0, so that, call after call, the whole list arrives at the head of the
-- queue in its own order and is routed before newer URLs.
-- Returns the number moved, or -1 when the host is still blocked.
local h, max = ARGV[A], tonumber(ARGV[A + 1])
if host_limits(h).block then return -1 end
-- The rule that parked the list, whose parked count goes down as it resumes.
local old = redis.call('HGET', K_PARKED, h)
local by = old and string.match(old, '^[^ ]+ %d+ (.+)$')
parkTouched[h] = by or true
local es = redis.call('RPOP', pk(h), max)
if not es then
  flush_stats()
  return 0
end
rule_bump(by, PSTAT.PARKED, -#es)
-- RPOP gives the last entry first; LPUSH in that order leaves them in list order.
bulk('LPUSH', fq(0), es)
bump('parked', -#es)
bump('queued', #es)
flush_stats()
return #es

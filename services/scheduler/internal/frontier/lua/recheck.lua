-- Recheck. ARGV[A]: host; ARGV[A+1]: n; then n triples: entry, action, rule scope. The
-- entries are the head of the host's back queue as Go read it; the call applies only if
-- they still are (else -1: Go reads again). Action 'k' keeps the entry (it moves to the
-- tail, so a pass over the queue, chunk by chunk, ends with it in its order), 'x' ends it
-- out of scope (counted excluded for the rule), 'p' parks it (its URL is blocked by a
-- URL-prefix rule). A host left with an empty queue is freed like any other.
-- Returns {kept, excluded, parked}.
local h, n = ARGV[A], tonumber(ARGV[A + 1])
local cur = redis.call('LRANGE', bq(h), 0, n - 1)
if #cur ~= n then return {-1, 0, 0} end
for j = 1, n do
  if cur[j] ~= ARGV[A + 2 + 3 * (j - 1)] then return {-1, 0, 0} end
end
redis.call('LTRIM', bq(h), n, -1)
local keep, park = {}, {}
local excluded = 0
for j = 1, n do
  local b = A + 2 + 3 * (j - 1)
  local e, act, scope = ARGV[b], ARGV[b + 1], ARGV[b + 2]
  if act == 'k' then
    keep[#keep + 1] = e
  elseif act == 'p' then
    park[#park + 1] = e
    rule_bump(scope, PSTAT.BLOCKED, 1)
    rule_bump(scope, PSTAT.PARKED, 1)
  else
    excluded = excluded + 1
    rule_bump(scope, PSTAT.EXCLUDED, 1)
  end
end
bulk('RPUSH', bq(h), keep)
bump('queued', -(excluded + #park))
bump('out_of_scope', excluded)
if #park > 0 then
  bulk('RPUSH', pk(h), park)
  bump('parked', #park)
  if not parkTouched[h] then parkTouched[h] = true end
end
local freed = {}
if redis.call('EXISTS', bq(h)) == 0 and redis.call('ZREM', K_HEAP, h) == 1 then
  freed[1] = h
  expire_state(h, tonumber(redis.call('HGET', hk(h), HF.NEXT) or '0') or 0)
end
free_and_route(freed)
flush_stats()
return {#keep, excluded, #park}

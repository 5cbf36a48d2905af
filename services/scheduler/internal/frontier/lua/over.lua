-- SettleOverBudget. ARGV[A..]: pairs of host, lease token: tasks just dispatched that Go
-- found beyond their domain's budget (a counter no shard's script can see: budget.go).
-- Each task whose token still holds its host ends as over budget instead of being sent:
-- its page charge is refunded, the rest of its host's queue ends over budget with it (the
-- domain is spent; both go to the skip spool), and its back queue is freed. Returns the
-- number settled.
local freed = {}
local n = 0
for j = A, #ARGV - 1, 2 do
  local h, tok = ARGV[j], ARGV[j + 1]
  local sid = slot_of(h, tok)
  local v = redis.call('HGET', K_LEASE, sid)
  local sp = v and string.find(v, ' ', 1, true)
  if sp and string.sub(v, 1, sp - 1) == tok then
    redis.call('HDEL', K_LEASE, sid)
    slot_ended(h, sid)
    redis.call('HDEL', K_LASTERR, sid)
    redis.call('ZREM', K_INFLIGHT, sid)
    bump('pages', -1)
    if charge_host(h) then redis.call('HINCRBY', hk(h), HF.PAGES, -1) end
    local rest = spool_queue(h, string.sub(v, sp + 1), '')
    bump('queued', -rest)
    bump('over_budget', rest + 1)
    redis.call('ZREM', K_HEAP, h)
    if slots_busy(h, host_limits(h), {}) == 0 then
      freed[#freed + 1] = h
      expire_state(h, tonumber(redis.call('HGET', hk(h), HF.NEXT) or '0') or 0)
    end
    n = n + 1
  end
end
free_and_route(freed)
flush_stats()
return n

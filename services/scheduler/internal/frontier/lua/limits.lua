-- Limits. ARGV[A]: the generation of the rules Go resolved the limits under ('' none);
-- ARGV[A+1]: '1' to make it the shard's (a change of the rules: the policy hash is
-- rewritten to hold it alone), '0' to store only while it is the shard's; then pairs
-- host, entry (frontierkeys.PolicyEntry; '' no rule). Stores each host's limits in its
-- state (HF.LIM). A host waiting in K_RESOLVE is taken out of it, counted under its
-- rules when its admission was not yet (PSTAT.HOSTS), and, when active, put back in the
-- heap at its next fetch time or now, whichever is later (it left the heap at a dispatch
-- that found its limits stale; the add NX keeps a host that is in the heap where it is), or
-- freed when its queue emptied meanwhile and no task of it is out.
-- Returns the number of hosts stored, or -1 when the generation is not the shard's.
local gen = ARGV[A]
if ARGV[A + 1] == '1' then
  redis.call('DEL', K_POLICY)
  if gen == '' then return 0 end
  redis.call('HSET', K_POLICY, POL.GEN, gen)
  -- The scripts count per rule in the counters' hash at every dispatch.
  redis.call('HSET', K_PSTATS, WIDE, WIDE_VALUE)
elseif gen == '' or redis.call('HGET', K_POLICY, POL.GEN) ~= gen then
  return -1
end
local n = 0
local freed = {}
for j = A + 2, #ARGV, 2 do
  local h, e = ARGV[j], ARGV[j + 1]
  redis.call('HSET', hk(h), HF.LIM, gen .. '\t' .. e)
  n = n + 1
  local fl = redis.call('HGET', K_RESOLVE, h)
  if fl then
    redis.call('HDEL', K_RESOLVE, h)
    if fl == '1' then rules_bump(entry_limits(e).rules, PSTAT.HOSTS, 1) end
    if redis.call('HEXISTS', K_HOSTS, h) == 1 then
      local st = redis.call('HMGET', hk(h), HF.NEXT, HF.SLOTS)
      local nx = tonumber(st[1] or '0') or 0
      if redis.call('LLEN', bq(h)) > 0 then
        redis.call('ZADD', K_HEAP, 'NX', n2s(math.max(nx, NOW)), h)
      elseif not slots_out(h, st[2]) then
        -- Its queue emptied while it waited (a scope recheck): freed like any other.
        freed[#freed + 1] = h
        expire_state(h, nx)
      end
    end
  end
end
free_and_route(freed)
flush_stats()
return n

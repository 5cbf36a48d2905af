-- Live site policies: a host's limits from the shard's policy table (frontierkeys.Shard.Policy),
-- written by the scheduler from the rules. Included after politeness.lua, after the
-- constants Go generates (POL_H, POL_D, LIM_*, LIM_UNSET, LIM_EXACT; politeness.PolicyModule).
--
-- Expects K_POLICY in scope: the policy table's key, or nil where no policy applies.
--
-- host_limits(h) merges, field by field, the host's own entry over the entries of its
-- name and each suffix of it, longest first (frontierkeys.PolicyCandidates), all read with
-- one HMGET, over the process-wide settings; an unset field falls through. It returns
-- {mind, kf, maxcd, conn, budget, block, rules, block_by}: budget is nil when no rule sets
-- it (the process-wide budget applies); rules are the scopes ("host:…", "domain:…") of the
-- entries that matched, block_by the scope that decided block. Results are kept for the
-- script's run, and a shard without any rule pays one EXISTS per script.
local pol_any = nil
local pol_cache = {}
-- policy_any says the shard's policy table has any entry.
local function policy_any()
  if pol_any == nil then
    pol_any = K_POLICY ~= nil and redis.call('EXISTS', K_POLICY) == 1
  end
  return pol_any
end
local function host_limits(h)
  local c = pol_cache[h]
  if c then return c end
  local lim = base_limits()
  if policy_any() then
    local cands, scopes = {POL_H .. h}, {POL_SCOPE_H .. h}
    local s = h
    while s do
      cands[#cands + 1] = POL_D .. s
      scopes[#scopes + 1] = POL_SCOPE_D .. s
      local d = string.find(s, '.', 1, true)
      if d then s = string.sub(s, d + 1) else s = nil end
    end
    local r = redis.call('HMGET', K_POLICY, unpack(cands))
    local got, rules = {}, {}
    for j = #r, 1, -1 do
      -- Least specific first, so that a more specific entry's fields overwrite.
      if r[j] then
        rules[#rules + 1] = scopes[j]
        local k = 0
        for tok in string.gmatch(r[j], '[^ ]+') do
          k = k + 1
          if tok ~= LIM_UNSET then
            got[k] = tok
            if k == LIM_BLOCK then lim.block_by = scopes[j] end
          end
        end
      end
    end
    lim.rules = rules
    if got[LIM_MIND] then lim.mind = tonumber(got[LIM_MIND]) end
    if got[LIM_KF] then lim.kf = tonumber(got[LIM_KF]) end
    if got[LIM_CD] == LIM_EXACT then
      lim.maxcd = math.huge
    elseif got[LIM_CD] then
      lim.maxcd = tonumber(got[LIM_CD])
    end
    if got[LIM_CONN] then lim.conn = tonumber(got[LIM_CONN]) end
    if got[LIM_BUDGET] then lim.budget = tonumber(got[LIM_BUDGET]) end
    lim.block = got[LIM_BLOCK] == '1'
  end
  pol_cache[h] = lim
  return lim
end

-- slots_out is the earliest lease deadline of the tasks of host h out (nil: none), over
-- its lease slots (frontierkeys.LeaseSlot: "<host>", "<host> <k>"), a few more than its
-- connections, which may have been lowered with tasks out.
local function slots_out(h)
  local ids = {h}
  for j = 1, math.max(host_limits(h).conn, 8) - 1 do ids[#ids + 1] = h .. POL_SLOT_SEP .. j end
  local d = redis.call('ZMSCORE', K_INFLIGHT, unpack(ids))
  local dl = nil
  for j = 1, #d do
    local x = tonumber(d[j] or '')
    if x and (not dl or x < dl) then dl = x end
  end
  return dl
end

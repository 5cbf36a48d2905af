-- Live site policies: a host's limits from the shard's policy table (frontierkeys.Shard.Policy),
-- written by the scheduler from the rules. Included after politeness.lua, after the
-- constants Go generates (POL_H, POL_D, LIM_*, LIM_UNSET, LIM_EXACT; politeness.PolicyModule).
--
-- Expects K_POLICY in scope: the policy table's key, or nil where no policy applies.
--
-- host_limits(h) merges, field by field, the host's own entry over the entries of its
-- name and each suffix of it, longest first (frontierkeys.PolicyCandidates), all read with
-- one HMGET, over the process-wide settings; an unset field falls through. It returns
-- {mind, kf, maxcd, conn, budget, block}: budget is nil when no rule sets it (the
-- process-wide budget applies). Results are kept for the script's run, and a shard without
-- any rule pays one EXISTS per script.
local pol_any = nil
local pol_cache = {}
local function host_limits(h)
  local c = pol_cache[h]
  if c then return c end
  local lim = base_limits()
  if pol_any == nil then
    pol_any = K_POLICY ~= nil and redis.call('EXISTS', K_POLICY) == 1
  end
  if pol_any then
    local cands = {POL_H .. h}
    local s = h
    while s do
      cands[#cands + 1] = POL_D .. s
      local d = string.find(s, '.', 1, true)
      if d then s = string.sub(s, d + 1) else s = nil end
    end
    local r = redis.call('HMGET', K_POLICY, unpack(cands))
    local got = {}
    for j = #r, 1, -1 do
      -- Least specific first, so that a more specific entry's fields overwrite.
      if r[j] then
        local k = 0
        for tok in string.gmatch(r[j], '[^ ]+') do
          k = k + 1
          if tok ~= LIM_UNSET then got[k] = tok end
        end
      end
    end
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

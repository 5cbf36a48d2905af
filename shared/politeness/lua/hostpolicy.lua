-- Live site policies: a host's limits, resolved in Go (politeness.Resolve) and stored in
-- the host's own state (frontierkeys.HostLim: "<generation>\t<entry>"). Included after
-- politeness.lua, after the constants Go generates (the table POL; politeness.PolicyNames).
--
-- Expects in scope K_POLICY (the hash of the shard's generation, or nil where no policy
-- applies) and hk(h), a host's state key.
--
-- host_limits(h) is h's stored entry, taken whole over the process-wide settings: nothing
-- is looked up or merged here. It returns {mind, kf, maxcd, conn, budget, block, rules,
-- block_by, stale}: budget is nil when no rule sets it (the process-wide budget applies);
-- rules are the scopes merged into the entry, block_by the one that decided block. An
-- entry of another generation than the shard's (or none) is stale: the process-wide
-- settings with stale = true, which the router and the dispatch hand to Go to resolve
-- (frontierkeys.Shard.Resolve) rather than apply. Results are kept for the script's run;
-- a shard without any rule pays one HGET per script and none per host.
local pol_gen = nil
local pol_cache = {}
-- policy_any says a rule is in force on the shard (its generation is read once).
local function policy_any()
  if pol_gen == nil then
    pol_gen = K_POLICY ~= nil and redis.call('HGET', K_POLICY, POL.GEN) or false
  end
  return pol_gen ~= false
end

-- ENTRY splits an entry (frontierkeys.PolicyEntry) in one match: its POL.BLOCK fields,
-- then block_by and the scopes.
local ENTRY = '^' .. string.rep('([^ ]+) ', POL.BLOCK - 1) .. '([^ ]+) ?([^ ]*) ?(.*)$'

-- entry_limits decodes entry v ('': no rule) into limits over the process-wide settings.
local function entry_limits(v)
  local lim = base_limits()
  local c = {string.match(v, ENTRY)}
  for k = 1, POL.BLOCK + 1 do
    if c[k] == POL.UNSET or c[k] == '' then c[k] = nil end
  end
  if c[POL.MIND] then lim.mind = tonumber(c[POL.MIND]) end
  if c[POL.KF] then lim.kf = tonumber(c[POL.KF]) end
  if c[POL.CD] == POL.EXACT then
    lim.maxcd = math.huge
  elseif c[POL.CD] then
    lim.maxcd = tonumber(c[POL.CD])
  end
  if c[POL.CONN] then lim.conn = tonumber(c[POL.CONN]) end
  if c[POL.BUDGET] then lim.budget = tonumber(c[POL.BUDGET]) end
  lim.block = c[POL.BLOCK] == '1'
  lim.block_by = c[POL.BLOCK + 1]
  for sc in string.gmatch(c[POL.BLOCK + 2] or '', '[^ ]+') do lim.rules[#lim.rules + 1] = sc end
  return lim
end

-- stored_limits decodes host h's HF.LIM value v (false or nil: none) and keeps it for the run.
local function stored_limits(h, v)
  local lim
  if not policy_any() then
    lim = base_limits()
  else
    local g, e = string.match(v or '', '^([^\t]*)\t(.*)$')
    if g == pol_gen then
      lim = entry_limits(e)
    else
      lim = base_limits()
      lim.stale = true
    end
  end
  pol_cache[h] = lim
  return lim
end

local function host_limits(h)
  local c = pol_cache[h]
  if c then return c end
  if not policy_any() then return stored_limits(h, nil) end
  return stored_limits(h, redis.call('HGET', hk(h), HF.LIM))
end

-- slot_span is how many of a host's lease slots (frontierkeys.LeaseSlot: "<host>",
-- "<host> <k>"), from the first, may hold a task of it: its connections (lim.conn), or
-- more while tasks are out on later slots that a higher limit, lowered since, let it take.
-- hw is its HF.SLOTS (false or nil: none), the high-water mark the frontier's dispatch
-- keeps of the slots it took. Reading as many slots as a rule may allow (shared/policy's
-- bound on connections) for every host whose slots are read, with one connection too
-- while any host of the shard has a task out beyond its first slot, would cost far more
-- than the one field, read with the host's state where a script reads that anyway.
local function slot_span(lim, hw)
  return math.max(lim.conn, tonumber(hw or '0') or 0)
end

-- slots_out is the earliest lease deadline of the tasks of host h out (nil: none), over
-- its slot_span (hw: its HF.SLOTS).
local function slots_out(h, hw)
  local ids = {h}
  for j = 1, slot_span(host_limits(h), hw) - 1 do ids[#ids + 1] = h .. POL.SLOT_SEP .. j end
  local d = redis.call('ZMSCORE', K_INFLIGHT, unpack(ids))
  local dl = nil
  for j = 1, #d do
    local x = tonumber(d[j] or '')
    if x and (not dl or x < dl) then dl = x end
  end
  return dl
end

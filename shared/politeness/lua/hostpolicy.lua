-- Live site policies: a host's limits from the shard's policy table (frontierkeys.Shard.Policy),
-- whose entries the scheduler resolves in Go (politeness.PolicyTable): each host and domain
-- rule's limits already merged over the domain rules above it. Included after
-- politeness.lua, after the constants Go generates (the table POL;
-- politeness.PolicyNames).
--
-- Expects K_POLICY in scope: the policy table's key, or nil where no policy applies.
--
-- host_limits(h) is the entry of h's most specific rule: the first the table holds of the
-- host's own field and a domain field for its name and each suffix, longest first
-- (frontierkeys.PolicyCandidates), taken whole over the process-wide settings; nothing is
-- merged here. It returns {mind, kf, maxcd, conn, budget, block, rules, block_by}: budget
-- is nil when no rule sets it (the process-wide budget applies); rules are the scopes
-- merged into the entry, block_by the one that decided block. Results are kept for the
-- script's run; a shard without any rule pays one HEXISTS per script. load_limits reads
-- several hosts' entries with one HMGET.
local pol_any = nil
local pol_cache = {}
-- policy_any says the shard's policy table has a rule in force.
local function policy_any()
  if pol_any == nil then
    pol_any = K_POLICY ~= nil and redis.call('HEXISTS', K_POLICY, POL.GEN) == 1
  end
  return pol_any
end

-- ENTRY splits an entry (frontierkeys.PolicyEntry) in one match: its POL.BLOCK fields,
-- then block_by and the scopes, which entries written before they were added lack.
local ENTRY = '^' .. string.rep('([^ ]+) ', POL.BLOCK - 1) .. '([^ ]+) ?([^ ]*) ?(.*)$'

-- entry_limits decodes entry v into limits over the process-wide settings.
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

-- load_limits reads the limits of the hosts hs not read yet in this run, with one HMGET per
-- 200 hosts. The domain fields are the name's tails from each dot (POL.D is the label
-- separator), cut from one string rather than built.
local function load_limits(hs)
  local todo = {}
  for _, h in ipairs(hs) do
    if not pol_cache[h] then
      if policy_any() then todo[#todo + 1] = h else pol_cache[h] = base_limits() end
    end
  end
  for c = 1, #todo, 200 do
    local fields, first = {}, {}
    local last = math.min(c + 199, #todo)
    for j = c, last do
      local h = todo[j]
      first[j] = #fields + 1
      fields[#fields + 1] = POL.H .. h
      local dh = POL.D .. h
      local i = 1
      while i do
        fields[#fields + 1] = string.sub(dh, i)
        i = string.find(dh, POL.D, i + 1, true)
      end
    end
    first[last + 1] = #fields + 1
    local r = redis.call('HMGET', K_POLICY, unpack(fields))
    for j = c, last do
      local lim = nil
      for k = first[j], first[j + 1] - 1 do
        if r[k] then
          lim = entry_limits(r[k])
          break
        end
      end
      pol_cache[todo[j]] = lim or base_limits()
    end
  end
end

local function host_limits(h)
  local c = pol_cache[h]
  if c then return c end
  load_limits({h})
  return pol_cache[h]
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

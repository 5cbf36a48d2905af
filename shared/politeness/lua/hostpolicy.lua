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
-- script's run; a shard without any rule pays one HGET per script.
--
-- The table is in force while it has a generation (POL_GEN, a fresh token each time it
-- changes; frontierkeys.PolicyGenField). An active host keeps what its lookup found in its
-- entry of the active hosts' hash (K_HOSTS), stamped with the generation: the generation
-- alone when no rule matched, else "<gen>\t<merged fields> <block_by> <scopes…>" (the
-- fields of the entries, before the process-wide settings fill what they leave unset, so
-- a restart with other settings needs no new lookup). active_limits reads that instead of
-- the table while the generation holds, so the lookup runs once per host and change, not
-- per URL and step. The same entry is kept in the host's state hash (HF.POL), which
-- outlives the host's activity: the router hands it to adopt_entry, so a host activated
-- again under the same generation needs no lookup either, and an outcome, which reads
-- that hash anyway, takes its limits from there (kept_limits). A new lookup writes both
-- (relookup).
local pol_gen = nil
local pol_read = false
local pol_cache = {}
-- policy_gen is the policy table's generation, nil when no rule is in force.
local function policy_gen()
  if not pol_read then
    pol_read = true
    if K_POLICY ~= nil then pol_gen = redis.call('HGET', K_POLICY, POL_GEN) or nil end
  end
  return pol_gen
end
-- policy_any says the shard's policy table has a rule in force.
local function policy_any() return policy_gen() ~= nil end

-- merged_limits turns the merged fields got (LIM_* positions, nil unset) into limits.
local function merged_limits(got, rules, block_by)
  local lim = base_limits()
  lim.rules = rules
  lim.block_by = block_by
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
  return lim
end

-- lookup reads host h's entries from the table: the merged fields, the scopes of the
-- entries that matched and the scope that decided block.
local function lookup(h)
  -- The domain fields are the name's tails from each dot (POL_D is the label
  -- separator), cut from one string rather than built.
  local dh = POL_D .. h
  local cands = {POL_H .. h, dh}
  local i = 2
  while true do
    local d = string.find(dh, POL_D, i, true)
    if not d then break end
    cands[#cands + 1] = string.sub(dh, d)
    i = d + 1
  end
  local r = redis.call('HMGET', K_POLICY, unpack(cands))
  local got, rules, block_by = {}, {}, nil
  for j = #r, 1, -1 do
    -- Least specific first, so that a more specific entry's fields overwrite.
    if r[j] then
      local scope
      if j == 1 then scope = POL_SCOPE_H .. h else scope = POL_SCOPE_D .. string.sub(cands[j], #POL_D + 1) end
      rules[#rules + 1] = scope
      local k = 0
      for tok in string.gmatch(r[j], '[^ ]+') do
        k = k + 1
        if tok ~= LIM_UNSET then
          got[k] = tok
          if k == LIM_BLOCK then block_by = scope end
        end
      end
    end
  end
  return got, rules, block_by
end

-- host_entry is the value of host h's entry in the active hosts' hash: what its lookup
-- found under the current generation ('1' without any rule).
local host_entry_of = {}
local function host_entry(h)
  local g = policy_gen()
  if not g then return '1' end
  local e = host_entry_of[h]
  if e then return e end
  local got, rules, block_by = lookup(h)
  if #rules == 0 then
    e = g
  else
    local f = {}
    for k = 1, LIM_BLOCK do f[k] = got[k] or LIM_UNSET end
    f[#f + 1] = block_by or LIM_UNSET
    for _, sc in ipairs(rules) do f[#f + 1] = sc end
    e = g .. '\t' .. table.concat(f, ' ')
  end
  host_entry_of[h] = e
  pol_cache[h] = merged_limits(got, rules, block_by)
  return e
end

local function host_limits(h)
  local c = pol_cache[h]
  if c then return c end
  if policy_any() then
    host_entry(h)
    return pol_cache[h]
  end
  c = base_limits()
  pol_cache[h] = c
  return c
end

-- ENTRY_BODY splits the body of a host entry that found rules (host_entry, after the
-- generation and tab) in one match: its LIM_BLOCK fields, block_by, then the scopes.
local ENTRY_BODY = '^' .. string.rep('([^ ]+) ', LIM_BLOCK + 1) .. '(.+)$'

-- entry_limits decodes host entry v (host_entry) of generation g; nil when v is of
-- another generation. It runs for every task dispatched and every outcome of a host a
-- rule names, hence one match and one table rather than a token loop.
local function entry_limits(v, g)
  if v == g then return base_limits() end
  local n = #g
  if string.sub(v, 1, n) ~= g or string.byte(v, n + 1) ~= 9 then return nil end
  local c = {string.match(v, ENTRY_BODY, n + 2)}
  local rules = {}
  for sc in string.gmatch(c[LIM_BLOCK + 2] or '', '[^ ]+') do rules[#rules + 1] = sc end
  for k = 1, LIM_BLOCK + 1 do
    if c[k] == LIM_UNSET then c[k] = nil end
  end
  return merged_limits(c, rules, c[LIM_BLOCK + 1])
end

-- adopt_entry takes v, the entry kept in host h's state hash (nil: none), as h's entry
-- when it is of the current generation, and says whether it did.
local function adopt_entry(h, v)
  local g = policy_gen()
  if not g or not v or host_entry_of[h] then return false end
  local c = entry_limits(v, g)
  if not c then return false end
  host_entry_of[h] = v
  pol_cache[h] = c
  return true
end

-- relookup looks host h up again and keeps its new entry in both places: its state hash
-- (HF.POL at key hkey) and, when h is active (active nil: asked), the active hosts' hash,
-- so that either may be read for it.
local function relookup(h, hkey, active)
  local e = host_entry(h)
  if active == nil then active = redis.call('HEXISTS', K_HOSTS, h) == 1 end
  if active then redis.call('HSET', K_HOSTS, h, e) end
  redis.call('HSET', hkey, HF.POL, e)
  return pol_cache[h]
end

-- active_limits is host_limits for a host whose entry in the active hosts' hash is v
-- (nil: not active) and whose state hash is at key hkey: read from v while its generation
-- is the table's, else looked up again (relookup).
local function active_limits(h, v, hkey)
  local c = pol_cache[h]
  if c then return c end
  local g = policy_gen()
  if not g or not v then return host_limits(h) end
  c = entry_limits(v, g)
  if not c then return relookup(h, hkey, true) end
  pol_cache[h] = c
  return c
end

-- kept_limits is host_limits for a host whose state hash (at key hkey) keeps v in HF.POL
-- (nil: none), for a script that reads that hash anyway: read from v while its generation
-- is the table's, else looked up again (relookup).
local function kept_limits(h, v, hkey)
  local c = pol_cache[h]
  if c then return c end
  local g = policy_gen()
  if not g then return host_limits(h) end
  c = v and entry_limits(v, g)
  if not c then return relookup(h, hkey, nil) end
  pol_cache[h] = c
  return c
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
  for j = 1, slot_span(host_limits(h), hw) - 1 do ids[#ids + 1] = h .. POL_SLOT_SEP .. j end
  local d = redis.call('ZMSCORE', K_INFLIGHT, unpack(ids))
  local dl = nil
  for j = 1, #d do
    local x = tonumber(d[j] or '')
    if x and (not dl or x < dl) then dl = x end
  end
  return dl
end

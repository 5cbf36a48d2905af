-- The limits of a claim's host (claim.lua, release.lua): its stored entry while that is of
-- the shard's generation (an active host's, which the scheduler keeps current); otherwise,
-- for a host never active or one whose rules changed since it was, the entry the claimer
-- resolved in Go from the rules its process watches (GO_ENTRY), never the process-wide
-- settings in a rule's place. Included after the policy module; kept for the run, so
-- slots_out reads the same.
local function claim_limits()
  local lim = host_limits(H)
  if policy_any() and not lim.stale then return lim end
  lim = entry_limits(GO_ENTRY)
  pol_cache[H] = lim
  return lim
end

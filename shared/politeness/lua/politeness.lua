-- Politeness: when a host may be asked again. The frontier's scripts (complete, reap) and
-- the claim scripts decide with these functions; politeness.Rules is the same rule in Go,
-- checked against this file from one table (shared/itest/politeness_test.go).
--
-- Expects in scope, as numbers: MIND (minimum delay, ms), KF (delay factor k), MAXCD (cap
-- on a host's Crawl-delay, ms), RETRYB (first error backoff, ms), MAXBO (backoff cap, ms).
--
-- A host's limits (lim) are a table {mind, kf, maxcd}: the process-wide MIND, KF and
-- MAXCD (base_limits), or what the live site policies set for the host (host_limits, in
-- the policy module); an exact Crawl-delay is maxcd = math.huge.
local function base_limits()
  return {mind = MIND, kf = KF, maxcd = MAXCD, conn = 1, block = false}
end

-- gap is the least time from the end of a request to the next request to the host: the
-- minimum delay, the host's Crawl-delay (capped at maxcd) and k times the response time,
-- whichever is largest. capped says the Crawl-delay was over the cap.
local function gap(cd, rt, lim)
  local capped = false
  if cd > lim.maxcd then
    cd = lim.maxcd
    capped = true
  end
  local g = lim.mind
  if cd > g then g = cd end
  if lim.kf * rt > g then g = lim.kf * rt end
  return g, capped
end

-- backoff is the wait after the errs-th error in a row (errs >= 1): RETRYB, doubled per
-- error, at most MAXBO.
local function backoff(errs)
  local x = errs - 1
  if x > 40 then x = 40 end
  local b = RETRYB * (2 ^ x)
  if b > MAXBO then b = MAXBO end
  return b
end

-- next_fetch is a host's next fetch time after an outcome, at now:
--   requested: a request reached the host and took dur ms: a full gap from now. Otherwise
--     the host keeps its stored next time nxt (no request, nothing to space).
--   late: the outcome came after its lease expired, so a request of an earlier delivery
--     may have just ended: a full gap from now at least, with rt, the host's last
--     response time.
--   errs > 0: the outcome is the errs-th error in a row: backed off.
--   ra: the host or the fetcher asked to wait this long (Retry-After, a busy server),
--     capped at MAXBO.
-- cd is the host's Crawl-delay, lim its limits. Returns the time and whether the
-- Crawl-delay was capped (for a request only).
local function next_fetch(now, requested, dur, cd, nxt, late, rt, errs, ra, lim)
  local te, capped = now, false
  if requested then
    local g
    g, capped = gap(cd, dur, lim)
    te = now + g
  elseif nxt > te then
    te = nxt
  end
  if late then
    local g = gap(cd, rt, lim)
    if now + g > te then te = now + g end
  end
  if errs > 0 then
    local b = backoff(errs)
    if now + b > te then te = now + b end
  end
  if ra > MAXBO then ra = MAXBO end
  if now + ra > te then te = now + ra end
  return te, capped
end

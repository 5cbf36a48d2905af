-- AddBatches. ARGV[A]: number of batches; ARGV[A+1]: X, the backlink weight of the
-- preference prioritiser, or '' when every URL comes with its front queue; ARGV[A+2]: the
-- generation of the rules Go resolved the hosts' limits under ('' none); ARGV[A+3]: the
-- number of hosts, then per host: host, its limits (frontierkeys.HostLimValue). Each
-- host's limits are stored in its state (HF.LIM) where they differ, so that the router
-- admits it with them, and only while the generation is the shard's: limits resolved
-- under other rules are not stored (the router then admits the host as stale and Go
-- resolves it before its dispatch). A hash the store creates expires as an idle host's
-- state does. Then per batch:
-- message id ('' = not idempotent), its stream sequence, source host ('' = seeds or
-- unknown), out-of-scope count, URL count, then per URL: priority, host, entry.
--
-- Without X the priority is the URL's front queue. With X it is the URL's link score Y·IL
-- (computed in Go); the script adds X·IB(host), IB = log2(1 + inlinks[host]), and maps the
-- score to queue F-1-floor(score), clamped (prioritize.QueueFor). backlinks counts, per
-- host, the distinct linking pages on other hosts: each batch (the URLs of one source page
-- for this shard) adds one to every host of it other than the source's own, and reads the
-- others' counts with one ZMSCORE. Counting happens only with X. The zset holds at most
-- BLKEEP hosts: a new host beyond that replaces the one with the fewest backlinks and
-- starts from its count plus one (Metwally et al.'s Space-Saving), so the memory is fixed,
-- a count is never below the truth and overstates it by at most the smallest kept count,
-- and a host linked from many pages is never the one forgotten.
--
-- Each batch is applied at most once: its id is added to the applied zset (scored by its
-- stream sequence) with ZADD NX in this same script, which keeps the queues and the
-- backlink counts exact under redelivery. The markers are trimmed below the frontier
-- consumer's ack floor (Go, TrimApplied): nothing acknowledged is delivered again.
-- A URL of a retired host ends as failed (a recrawl keeps its state in the outbox); one
-- beyond a page budget as over budget.
-- Returns per batch the number of URLs queued, or -1 for an already applied batch; a batch
-- that refused URLs here returns {queued, k, why, k, why, ...} instead: k the URL's place
-- in the batch (1-based), why 1 its host retired, 2 its host's page budget spent, 3 the
-- crawl's (Go lists them in the skip log; Redis keeps nothing of them).
local nb = tonumber(ARGV[A])
local X = tonumber(ARGV[A + 1])
local LIMS = {}
local gen_ok = (ARGV[A + 2] ~= '' and policy_any() and pol_gen == ARGV[A + 2])
local i = A + 4
for _ = 1, tonumber(ARGV[A + 3]) do
  LIMS[ARGV[i]] = ARGV[i + 1]
  i = i + 2
end
local perq = {}
for p = 0, F - 1 do perq[p] = {} end
-- Admission state per host for the whole call: 'ok', 'over' (per-host budget spent) or
-- 'retired'; neither can change while the script runs.
local hostState = {}
local LOG2 = math.log(2)
local function ib(n) return X * (math.log(1 + n) / LOG2) end
local function backlink(h)
  local c = redis.call('ZADD', K_BACKLINKS, 'XX', 'INCR', 1, h)
  if c then return tonumber(c) end
  c = 1
  if redis.call('ZCARD', K_BACKLINKS) >= BLKEEP then
    local m = redis.call('ZPOPMIN', K_BACKLINKS)
    c = tonumber(m[2]) + 1
  end
  redis.call('ZADD', K_BACKLINKS, c, h)
  return c
end
local out = {}
for b = 1, nb do
  local id, seq, src = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local noos, nu = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  i = i + 5
  local fresh = true
  if id ~= '' then
    fresh = redis.call('ZADD', K_APPLIED, 'NX', seq, id) == 1
  end
  if not fresh then
    out[b] = -1
    i = i + 3 * nu
  else
    bump('accepted', noos + nu)
    bump('out_of_scope', noos)
    local score = {}
    if X then
      local ask = {}
      for k = 0, nu - 1 do
        local h = ARGV[i + 3 * k + 1]
        if score[h] == nil then
          if src ~= '' and h ~= src then
            score[h] = ib(backlink(h))
          else
            score[h] = 0
            ask[#ask + 1] = h
          end
        end
      end
      for c = 1, #ask, 1000 do
        local r = redis.call('ZMSCORE', K_BACKLINKS, unpack(ask, c, math.min(c + 999, #ask)))
        for j = 1, #r do score[ask[c + j - 1]] = ib(tonumber(r[j] or 0) or 0) end
      end
    end
    local added, refused = 0, nil
    for k = 1, nu do
      local p, h, e = ARGV[i], ARGV[i + 1], ARGV[i + 2]
      i = i + 3
      local s = hostState[h]
      if s == nil then
        local st = redis.call('HMGET', hk(h), HF.RETIRED, HF.PAGES, HF.LIM)
        local v = LIMS[h]
        if gen_ok and v and st[3] ~= v then
          local fresh = not (st[1] or st[2] or st[3]) and redis.call('EXISTS', hk(h)) == 0
          redis.call('HSET', hk(h), HF.LIM, v)
          if fresh and redis.call('HEXISTS', K_HOSTS, h) == 0 then expire_state(h, NOW) end
          st[3] = v
        end
        -- Pages are counted only while a budget applies (charge_host), so a host
        -- without a count needs no limits to be under its budget; stale limits decide
        -- nothing (the dispatch applies the budget once they are resolved).
        local used = tonumber(st[2] or '0') or 0
        if st[1] then
          s = 'retired'
        elseif used > 0 and not stored_limits(h, st[3]).stale and host_budget(h) > 0 and used >= host_budget(h) then
          s = 'over'
        else
          s = 'ok'
        end
        hostState[h] = s
      end
      if s == 'retired' then
        bump('failed', 1)
        keep_recrawl(e, 0)
        refused = refused or {0}
        refused[#refused + 1] = k
        refused[#refused + 1] = 1
      elseif s == 'over' or (MAXP > 0 and pages_used() >= MAXP) then
        bump('over_budget', 1)
        refused = refused or {0}
        refused[#refused + 1] = k
        refused[#refused + 1] = s == 'over' and 2 or 3
      else
        local q
        if X then
          q = F - 1 - math.floor(score[h] + tonumber(p) + 1e-9)
          if q < 0 then q = 0 end
          if q > F - 1 then q = F - 1 end
        else
          q = tonumber(p)
        end
        local l = perq[q]
        l[#l + 1] = e
        added = added + 1
      end
    end
    bump('queued', added)
    if refused then
      refused[1] = added
      out[b] = refused
    else
      out[b] = added
    end
  end
end
for p = 0, F - 1 do bulk('RPUSH', fq(p), perq[p]) end
flush_stats()
return out

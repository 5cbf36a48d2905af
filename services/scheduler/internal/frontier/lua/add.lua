-- AddBatches. ARGV[A]: number of batches; then per batch: message id ('' = not
-- idempotent), out-of-scope count, URL count, then per URL: front queue, host, entry.
-- Each batch is applied at most once: its id is recorded with SET NX in this same script.
-- Returns per batch the number of URLs queued, or -1 for an already applied batch.
local nb = tonumber(ARGV[A])
local i = A + 1
local perq = {}
for p = 0, F - 1 do perq[p] = {} end
local hostOver = {}
local out = {}
for b = 1, nb do
  local id, noos, nu = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  i = i + 3
  local fresh = true
  if id ~= '' then
    fresh = redis.call('SET', PFX .. 'applied:' .. id, '1', 'NX', 'EX', 86400)
  end
  if not fresh then
    out[b] = -1
    i = i + 3 * nu
  else
    bump('accepted', noos + nu)
    bump('out_of_scope', noos)
    local added = 0
    for _ = 1, nu do
      local p, h, e = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
      i = i + 3
      local over = MAXP > 0 and pages_used() >= MAXP
      if not over and MAXPH > 0 then
        local o = hostOver[h]
        if o == nil then
          o = tonumber(redis.call('HGET', hk(h), 'pages') or '0') >= MAXPH
          hostOver[h] = o
        end
        over = o
      end
      if over then
        bump('over_budget', 1)
      else
        local q = perq[p]
        q[#q + 1] = e
        added = added + 1
      end
    end
    bump('queued', added)
    out[b] = added
  end
end
for p = 0, F - 1 do bulk('RPUSH', fq(p), perq[p]) end
flush_stats()
return out

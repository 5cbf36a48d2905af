-- Readmit. ARGV[A]: n; then n members of the page log (K_PAGELOG, "<token>\n<host>\n
-- <entry>") whose pages NATS lost. Each member still in the log leaves it and its URL goes
-- back to the head of front queue 0 counting an attempt, no longer counted fetched: it is
-- dispatched again under a new lease, so its page and outputs get new ids. A member gone
-- already (another scheduler of the shard re-admitted it, or the trim passed it) is
-- skipped, so each lost page is re-admitted once.
-- Returns the number re-admitted.
local es = {}
for j = 1, tonumber(ARGV[A]) do
  local m = ARGV[A + j]
  if redis.call('ZREM', K_PAGELOG, m) == 1 then
    local e = string.match(m, '^[^\n]*\n[^\n]*\n(.*)$')
    local d, hp, att, u = parse(e or '')
    if d then
      -- LPUSH puts each ahead of the one before: the first member ends first in the queue.
      table.insert(es, 1, d .. ' ' .. hp .. ' ' .. n2s(att + 1) .. ' ' .. u)
    end
  end
end
bulk('LPUSH', fq(0), es)
bump('fetched', -#es)
bump('queued', #es)
flush_stats()
return #es

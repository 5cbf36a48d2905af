-- Park. ARGV[A..]: hosts. Each host the live policy now blocks has its back queue moved to
-- its park list (park_host): an idle host leaves the heap and frees its back queue, a host
-- with a task out keeps its slot until the outcome, which parks what comes back. Run by Go
-- over the active hosts after a change that blocks something, so a blocked host's URLs
-- are parked at once rather than when it is next due.
-- Returns the number of URLs parked.
local freed = {}
local n = 0
for j = A, #ARGV do
  local h = ARGV[j]
  if host_limits(h).block then
    local m, f = park_host(h)
    n = n + m
    if f then freed[#freed + 1] = h end
  end
end
-- park_host freed the slots already; the router fills them.
if #freed > 0 then route() end
flush_stats()
return n

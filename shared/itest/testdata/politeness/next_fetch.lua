-- ARGV[6..]: now, requested, took, crawl-delay, stored next, late, last response, error
-- streak, wait, host (its limits from the policy table KEYS[1]). Returns {next time,
-- capped} as strings (Redis would truncate a fraction).
local te, capped = next_fetch(tonumber(ARGV[6]), ARGV[7] == '1', tonumber(ARGV[8]),
  tonumber(ARGV[9]), tonumber(ARGV[10]), ARGV[11] == '1', tonumber(ARGV[12]),
  tonumber(ARGV[13]), tonumber(ARGV[14]), host_limits(H))
local c = '0'
if capped then c = '1' end
return {string.format('%.0f', te), c}

-- Adds the band entries of a batch's originals in one partition (Index.Check, second
-- phase).
--
-- KEYS[1] = the partition's key prefix, with its hash tag: every key the script builds
-- starts with it, so it routes the call and is the slot of them all. ARGV[1] = bucket cap,
-- then three arguments per original: its SimHash as 16 hex digits, the value
-- "<seq> <URL>", and the mask of the bands to add it to (bit b-1 for band b) plus 16 times
-- the mask of those whose bucket the lookup found near its cap, which are counted first.
-- Returns the number of entries refused because their bucket was at its cap. Only fields
-- the lookup found absent are sent, so a retried batch does not renumber its originals;
-- HSET rather than HSETNX, which costs Redis half as much again per call.

local prefix, cap, full = KEYS[1], tonumber(ARGV[1]), 0
local band = bit.band
for a = 2, #ARGV, 3 do
  local sh, val, mask = ARGV[a], ARGV[a+1], tonumber(ARGV[a+2])
  for b = 1, 4 do
    local m = 2^(b-1)
    if band(mask, m) ~= 0 then
      local key = prefix .. 'band:' .. (b-1) .. ':' .. string.sub(sh, 4*b-3, 4*b)
      if band(mask, 16 * m) == 0 or redis.call('HLEN', key) < cap then
        redis.call('HSET', key, sh, val)
      elseif redis.call('HEXISTS', key, sh) == 0 then
        full = full + 1
      end
    end
  end
end
return full

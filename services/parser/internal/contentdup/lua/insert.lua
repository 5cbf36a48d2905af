-- Adds the band entries of a batch's originals in one partition (Index.Check, second
-- phase).
--
-- KEYS[1] = the partition's key prefix, with its hash tag: every key the script builds
-- starts with it, so it routes the call and is the slot of them all. ARGV[1] = bucket
-- cap, then three arguments per original: its SimHash as 16 hex digits, the value
-- "<seq> <URL>", and the mask of the bands to add it to (bit b-1 for band b).
-- Returns the number of entries refused because their bucket was at its cap. A field
-- already present is kept as it is: a retried batch does not renumber its originals.

local prefix, cap, full = KEYS[1], tonumber(ARGV[1]), 0
for a = 2, #ARGV, 3 do
  local sh, val, mask = ARGV[a], ARGV[a+1], tonumber(ARGV[a+2])
  for b = 1, 4 do
    if bit.band(mask, 2^(b-1)) ~= 0 then
      local key = prefix .. 'band:' .. (b-1) .. ':' .. string.sub(sh, 4*b-3, 4*b)
      if redis.call('HLEN', key) < cap then
        redis.call('HSETNX', key, sh, val)
      elseif redis.call('HEXISTS', key, sh) == 0 then
        full = full + 1
      end
    end
  end
end
return full

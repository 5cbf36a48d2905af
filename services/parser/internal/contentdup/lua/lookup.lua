-- The lookup of one partition for a batch (Index.Check, first phase), by the rules of the
-- package comment (contentdup.go).
--
-- KEYS[1] = the partition's key prefix, with its hash tag: every key the script builds
-- starts with it, so it routes the call and is the slot of them all. ARGV[1] = max
-- distance, ARGV[2] = bucket cap, ARGV[3] = exact bucket cap (0: none), then six
-- arguments per page that has keys in the partition, in batch order:
-- URL; its text digest's exact entry "<bucket>:<field>" when it is in the partition, else
-- ""; "1" when the page may be stored; SimHash as 16 hex digits, or "" when it takes no
-- near lookup; the mask of its bands whose bucket is in the partition (bit b-1 for band
-- b); and the URL's previous text digest's entry when it is in the partition and the text
-- changed, else "": that entry is deleted if it still holds the URL. A new entry that
-- takes its bucket past the exact bucket cap evicts another of the bucket's at random.
-- Returns five values per page: the URL stored under the digest before the call ("" when
-- none, and then the page's URL is stored if it may be); the distance of the closest
-- original within the max distance in its buckets here that is not the page's URL (-1
-- when none; ties: the lower seq), that original's seq and URL; and the mask of the
-- buckets that hold the page's SimHash already (bit b-1 for band b) plus 16 times the mask
-- of those that may be at BucketCap by the page's insert: the entries read, plus one for
-- each earlier page of the batch that read the bucket, reach the cap. Only for those does
-- the insert count the bucket again, so a bucket far from its cap costs no more than its
-- read. A page found an exact duplicate here
-- skips its near lookup, which cannot change its verdict.
--
-- Lua 5.1 numbers are doubles and the bit library works on 32 bits, so a SimHash is
-- handled as four 16-bit parts, compared part by part with bit.bxor and a byte popcount
-- table, written here as a constant (pop[x] = the set bits of byte x; a Go test checks it):
-- computing it in Lua cost more than the lookups of a typical batch. A bucket's candidates
-- already equal the page in that band; only the other three parts are compared, and the
-- comparison stops once it exceeds the best distance so far. A bucket several pages of the
-- batch read is read once.

local prefix, maxd, cap, ecap = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local pop = {
  [0]=0,1,1,2,1,2,2,3,1,2,2,3,2,3,3,4,
  1,2,2,3,2,3,3,4,2,3,3,4,3,4,4,5,
  1,2,2,3,2,3,3,4,2,3,3,4,3,4,4,5,
  2,3,3,4,3,4,4,5,3,4,4,5,4,5,5,6,
  1,2,2,3,2,3,3,4,2,3,3,4,3,4,4,5,
  2,3,3,4,3,4,4,5,3,4,4,5,4,5,5,6,
  2,3,3,4,3,4,4,5,3,4,4,5,4,5,5,6,
  3,4,4,5,4,5,5,6,4,5,5,6,5,6,6,7,
  1,2,2,3,2,3,3,4,2,3,3,4,3,4,4,5,
  2,3,3,4,3,4,4,5,3,4,4,5,4,5,5,6,
  2,3,3,4,3,4,4,5,3,4,4,5,4,5,5,6,
  3,4,4,5,4,5,5,6,4,5,5,6,5,6,6,7,
  2,3,3,4,3,4,4,5,3,4,4,5,4,5,5,6,
  3,4,4,5,4,5,5,6,4,5,5,6,5,6,6,7,
  3,4,4,5,4,5,5,6,4,5,5,6,5,6,6,7,
  4,5,5,6,5,6,6,7,5,6,6,7,6,7,7,8
}
local band, rshift, bxor, sub = bit.band, bit.rshift, bit.bxor, string.sub
local out, buckets, readers = {}, {}, {}
-- A page's SimHash in hex and as numbers, four 16-bit parts; reused from page to page.
local hex, parts = {}, {}
-- The exact bucket and field of an entry "<bucket>:<field>".
local function exact(e)
  local c = string.find(e, ':', 1, true)
  return prefix .. 'exact:' .. sub(e, 1, c-1), sub(e, c+1)
end
for a = 4, #ARGV, 6 do
  local url, dig, sh, mask = ARGV[a], ARGV[a+1], ARGV[a+3], tonumber(ARGV[a+4])
  if ARGV[a+5] ~= '' then
    local key, f = exact(ARGV[a+5])
    if redis.call('HGET', key, f) == url then redis.call('HDEL', key, f) end
  end
  local first = ''
  if dig ~= '' then
    local key, f = exact(dig)
    -- A page that may be stored sets the entry if it is absent, the common case, and reads
    -- it only if it was there: one command where HGET then HSET were two.
    if ARGV[a+2] ~= '1' then
      first = redis.call('HGET', key, f) or ''
    elseif redis.call('HSETNX', key, f, url) == 0 then
      first = redis.call('HGET', key, f) or ''
    elseif ecap > 0 and redis.call('HLEN', key) > ecap then
      -- Two distinct fields, at least one of them another than the new one.
      for _, g in ipairs(redis.call('HRANDFIELD', key, 2)) do
        if g ~= f then redis.call('HDEL', key, g) break end
      end
    end
  end
  local best, bestSeq, bestURL, present = maxd, 0, nil, 0
  if mask ~= 0 and (first == '' or first == url) then
    for q = 1, 4 do
      hex[q] = sub(sh, 4*q-3, 4*q)
      parts[q] = tonumber(hex[q], 16)
    end
    for b = 1, 4 do
      local m = 2^(b-1)
      if band(mask, m) ~= 0 then
        local key = prefix .. 'band:' .. (b-1) .. ':' .. hex[b]
        local e = buckets[key]
        if not e then
          e = redis.call('HGETALL', key)
          buckets[key] = e
        end
        local k = readers[key] or 0
        readers[key] = k + 1
        if #e / 2 + k >= cap then present = present + 16 * m end
        for i = 1, #e, 2 do
          local f = e[i]
          if f == sh then present = present + m end
          local d = 0
          for q = 1, 4 do
            if q ~= b then
              local x = bxor(parts[q], tonumber(sub(f, 4*q-3, 4*q), 16))
              d = d + pop[band(x, 255)] + pop[rshift(x, 8)]
              if d > best then break end
            end
          end
          if d <= best then
            local v = e[i+1]
            local sp = string.find(v, ' ', 1, true)
            local s, u = tonumber(sub(v, 1, sp-1)), sub(v, sp+1)
            if u ~= url and (bestURL == nil or d < best or s < bestSeq) then
              best, bestSeq, bestURL = d, s, u
            end
          end
        end
      end
    end
  end
  local n = #out
  out[n+1] = first
  if bestURL then
    out[n+2], out[n+3], out[n+4] = best, bestSeq, bestURL
  else
    out[n+2], out[n+3], out[n+4] = -1, 0, ''
  end
  out[n+5] = present
end
return out

-- Checks a batch of pages against the index and indexes the originals (Index.Check), by
-- the rules of the package comment (contentdup.go).
--
-- KEYS[1] = seq. ARGV[1] = key prefix (with the hash tag), ARGV[2] = max distance,
-- ARGV[3] = bucket cap, then four arguments per page: URL, text digest ("" = no exact
-- check), SimHash as 16 hex digits ("" = no near lookup), "1" when it may be stored.
-- Returns, per page, kind (0 original, 1 exact, 2 near), URL of the original ("" for an
-- original) and distance; then the number of insertions refused by full buckets.
--
-- Lua 5.1 numbers are doubles and the bit library works on 32 bits, so a SimHash is
-- handled as four 16-bit parts, compared part by part with bit.bxor and a byte popcount
-- table, written here as a constant (pop[x] = the set bits of byte x; a Go test checks it):
-- computing it in Lua cost more than the lookups of a typical batch. A bucket's candidates
-- already equal the page in that band; only the other three parts are compared, and the
-- comparison stops once it exceeds the best distance so far.

local prefix, maxd, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local seq0 = tonumber(redis.call('GET', KEYS[1]) or '0')
local seq = seq0
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
local band, rshift, bxor = bit.band, bit.rshift, bit.bxor
local out, full = {}, 0
for a = 4, #ARGV, 4 do
  local url, dig, sh, store = ARGV[a], ARGV[a+1], ARGV[a+2], ARGV[a+3] == '1'
  local kind, of, dist = 0, '', 0
  if dig ~= '' then
    local key = prefix .. 'exact:' .. dig
    local first = redis.call('GET', key)
    if not first then
      if store then redis.call('SET', key, url) end
    elseif first ~= url then
      kind, of = 1, first
    end
  end
  if kind == 0 and sh ~= '' then
    local parts, keys, sizes, present = {}, {}, {}, {}
    for b = 1, 4 do parts[b] = tonumber(string.sub(sh, 4*b-3, 4*b), 16) end
    local best, bestSeq, bestURL = maxd, nil, nil
    for b = 1, 4 do
      local key = prefix .. 'band:' .. (b-1) .. ':' .. string.sub(sh, 4*b-3, 4*b)
      keys[b] = key
      local e = redis.call('HGETALL', key)
      sizes[b] = #e / 2
      for i = 1, #e, 2 do
        local f = e[i]
        if f == sh then present[b] = true end
        local d = 0
        for q = 1, 4 do
          if q ~= b then
            local x = bxor(parts[q], tonumber(string.sub(f, 4*q-3, 4*q), 16))
            d = d + pop[band(x, 255)] + pop[rshift(x, 8)]
            if d > best then break end
          end
        end
        if d <= best then
          local v = e[i+1]
          local sp = string.find(v, ' ', 1, true)
          local s, u = tonumber(string.sub(v, 1, sp-1)), string.sub(v, sp+1)
          if u ~= url and (bestURL == nil or d < best or s < bestSeq) then
            best, bestSeq, bestURL = d, s, u
          end
        end
      end
    end
    if bestURL then
      kind, of, dist = 2, bestURL, best
    elseif store then
      local val = nil
      for b = 1, 4 do
        if not present[b] then
          if sizes[b] < cap then
            if not val then
              seq = seq + 1
              val = seq .. ' ' .. url
            end
            redis.call('HSET', keys[b], sh, val)
          else
            full = full + 1
          end
        end
      end
    end
  end
  out[#out+1] = kind
  out[#out+1] = of
  out[#out+1] = dist
end
if seq ~= seq0 then redis.call('SET', KEYS[1], seq) end
out[#out+1] = full
return out

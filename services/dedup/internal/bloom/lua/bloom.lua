-- The Bloom filter's algorithm as a module of local functions, the one place it is
-- written: this package's test-and-set and contains scripts and the seen package's
-- memoised batch (services/dedup/internal/seen) are built on it.
--
-- bloom_layout(spec) reads a Layout's spec (ARGV) into the list of layers (k, the index
-- in KEYS of the first bitmap, the bitmap count, the position of the layer's pairs in a
-- record) and the struct format of one record. recs is a string of records built by
-- Layout.AppendRecord (one struct.unpack per record).
--
-- bloom_tas(recs, L, fmt, room) goes through the records in order. A URL whose bits are
-- all set in an older layer is seen (GETBIT up to the first clear bit: about two calls per
-- layer for a new URL, nothing written). Otherwise its bits in the newest layer are set
-- with BITFIELD SET u1, which returns the old bits: the URL is new when one of them was
-- clear. When the newest layer is one bitmap, the SETs of consecutive URLs go in one
-- BITFIELD of up to 1024 arguments (bloom_bf holds the constant arguments; only offsets
-- are written), in order, so a URL repeated within the batch is new only the first time;
-- a layer over several keys sets each URL's bits with one BITFIELD per key. It stops after
-- room new URLs and returns the new records' indexes, in order, how many records it went
-- through, and whether it went through all.
--
-- Profiled on redis-server 7.0 with the AOF on: the script's time went to the per-call
-- cost of redis.call (argument conversion, propagation to the AOF, reply parsing) and to
-- formatting Lua numbers as arguments, not to the bit operations. One GETBIT/SETBIT call
-- per bit cost 14–15 µs of Redis CPU per new URL (k = 7); batched BITFIELD SETs with the
-- offsets passed as strings cost 7–8 µs (k = 8). The price: a URL already in the newest
-- layer is written again (same bits, but the command reaches the AOF); the in-process
-- cache keeps most repeats away from Redis.
--
-- bloom_contains(recs, L, fmt) returns the indexes of the records whose bits are all set
-- in some layer, writing nothing.

local bloom_bf = {}
for i = 0, 255 do
  bloom_bf[4*i+1], bloom_bf[4*i+2], bloom_bf[4*i+4] = 'SET', 'u1', '1'
end

local function bloom_layout(spec)
  local nl = struct.unpack('>I4', spec)
  local L, at = {}, 2
  for i = 1, nl do
    local k, base, keys = struct.unpack('>I4I4I4', spec, 5 + 12 * (i - 1))
    L[i] = {k = k, base = base, keys = keys, at = at}
    at = at + 2 * k
  end
  local np = (at - 2) / 2
  -- The last value struct.unpack returns is where the next record starts.
  L.next = at
  return L, '>I4' .. string.rep('I4s', np)
end

local function bloom_has(r, l)
  for i = l.at, l.at + 2 * l.k - 1, 2 do
    if redis.call('GETBIT', KEYS[l.base + r[i]], r[i+1]) == 0 then
      return false
    end
  end
  return true
end

local function bloom_set(r, l)
  local clear, n, key = false, 0, r[l.at]
  for i = l.at, l.at + 2 * l.k - 1, 2 do
    if r[i] ~= key then
      local old = redis.call('BITFIELD', KEYS[l.base + key], unpack(bloom_bf, 1, n))
      for j = 1, #old do
        if old[j] == 0 then clear = true end
      end
      n, key = 0, r[i]
    end
    bloom_bf[n+3] = r[i+1]
    n = n + 4
  end
  local old = redis.call('BITFIELD', KEYS[l.base + key], unpack(bloom_bf, 1, n))
  for j = 1, #old do
    if old[j] == 0 then clear = true end
  end
  return clear
end

local function bloom_tas(recs, L, fmt, room)
  local nl, newest = #L, L[#L]
  local k, first, last = newest.k, newest.at + 1, newest.at + 2 * newest.k - 1
  local batched = newest.keys == 1
  local new, n, done, at = {}, 0, 0, 1
  -- URLs whose newest-layer bits wait in bloom_bf (m arguments) for one BITFIELD.
  local pend, pn, m = {}, 0, 0
  local function flush()
    if pn == 0 then return end
    local old = redis.call('BITFIELD', KEYS[newest.base], unpack(bloom_bf, 1, m))
    for u = 1, pn do
      for j = (u - 1) * k + 1, u * k do
        if old[j] == 0 then
          n = n + 1
          new[n] = pend[u]
          break
        end
      end
    end
    pn, m = 0, 0
  end
  while at <= #recs do
    if n + pn >= room or m + 4 * k > #bloom_bf then
      flush()
      if n >= room then break end
    end
    local r = {struct.unpack(fmt, recs, at)}
    at = r[L.next]
    local seen = false
    for li = 1, nl - 1 do
      if bloom_has(r, L[li]) then
        seen = true
        break
      end
    end
    if not seen then
      if batched then
        for i = first, last, 2 do
          bloom_bf[m + 3] = r[i]
          m = m + 4
        end
        pn = pn + 1
        pend[pn] = r[1]
      elseif bloom_set(r, newest) then
        n = n + 1
        new[n] = r[1]
      end
    end
    done = done + 1
  end
  flush()
  return new, done, at > #recs
end

local function bloom_contains(recs, L, fmt)
  local found, n, at = {}, 0, 1
  while at <= #recs do
    local r = {struct.unpack(fmt, recs, at)}
    at = r[L.next]
    for li = 1, #L do
      if bloom_has(r, L[li]) then
        n = n + 1
        found[n] = r[1]
        break
      end
    end
  end
  return found
end

-- Pre-sizing of a layer's bitmaps, for the scripts that create a layer (init, grow):
-- writing the last bit allocates the whole string now, not by growing it under load.
-- bloom_presize(first, keybits, m): KEYS[first..] are the layer's bitmaps, keybits the
-- bits of a full key, m the layer's bits.

local function bloom_presize(first, keybits, m)
  for i = first, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 0 then
      local last = math.min(keybits, m - (i - first) * keybits) - 1
      redis.call('SETBIT', KEYS[i], string.format('%d', last), 0)
    end
  end
end

-- Apply one set of rule changes atomically: the rules, the version and the audit log
-- move together or not at all.
-- KEYS: rules (hash), version (string), audit (stream)
-- ARGV: expected version, new version's time (unix ms), by, then per change:
--       scope, new Stored JSON ("" removes the scope's rule), source
-- Returns {"moved", current version} when the store is no longer at the expected version,
-- else {"ok", new version}.
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if cur ~= tonumber(ARGV[1]) then
  return {'moved', cur}
end
local v = cur + 1
local at, by = ARGV[2], ARGV[3]
for i = 4, #ARGV, 3 do
  local scope, new, source = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local old = redis.call('HGET', KEYS[1], scope) or ''
  if new == '' then
    redis.call('HDEL', KEYS[1], scope)
  else
    redis.call('HSET', KEYS[1], scope, new)
  end
  redis.call('XADD', KEYS[3], '*', 'version', v, 'at', at, 'by', by, 'source', source,
    'scope', scope, 'old', old, 'new', new)
end
redis.call('SET', KEYS[2], v)
return {'ok', v}

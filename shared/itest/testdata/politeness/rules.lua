-- The rules as the frontier's prelude defines them, from politeness.Rules.Args.
local MIND, KF, MAXCD = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local RETRYB, MAXBO = tonumber(ARGV[4]), tonumber(ARGV[5])
-- The shard's generation the row wrote, the host whose limits apply and its state key.
local K_POLICY, H, K_HOST = KEYS[1], ARGV[15], KEYS[2]
local function hk() return K_HOST end

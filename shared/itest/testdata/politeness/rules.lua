-- The rules as the frontier's prelude defines them, from politeness.Rules.Args.
local MIND, KF, MAXCD = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local RETRYB, MAXBO = tonumber(ARGV[4]), tonumber(ARGV[5])
-- The live policy table the row wrote, and the host whose limits apply.
local K_POLICY, H = KEYS[1], ARGV[15]

-- I2: an accepted cancel bumps the epoch exactly once; a retry returns the bumped value.
-- KEYS: meta   ARGV: owner, incarnation, cancelled_epoch
fenced(KEYS[1], ARGV[1], ARGV[2])
local stored = tonumber(redis.call('HGET', KEYS[1], 'epoch'))
local cancelled = tonumber(ARGV[3])
if stored == cancelled then return redis.call('HINCRBY', KEYS[1], 'epoch', 1) end
if stored > cancelled then return stored end
fail('EPOCH_AHEAD', 'cancel of epoch ' .. ARGV[3] .. ' but the session is at ' .. stored)

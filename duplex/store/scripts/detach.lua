-- The socket serving `generation` went away: start the grace period
-- (duplex.lease.detach). A stale generation or a second detach is a no-op.
-- KEYS: meta, leases   ARGV: sid, generation, now
local m = redis.call('HMGET', KEYS[1], 'state', 'generation', 'detached_at')
if m[1] ~= 'open' or tonumber(m[2]) ~= tonumber(ARGV[2]) or m[3] ~= '' then return 0 end
redis.call('HSET', KEYS[1], 'detached_at', ARGV[3])
index_lease(KEYS[2], KEYS[1], ARGV[1])
return 1

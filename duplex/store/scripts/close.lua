-- End a session (duplex.lease.end) and free its admission slot. Returns 1 only
-- for the call that ended it. Keys linger so a late resume learns it ended.
-- KEYS: meta, leases, owner_sessions, then the other session keys to expire
-- ARGV: sid, owner, incarnation, end state, keep_ms
local meta = KEYS[1]
local m = redis.call('HMGET', meta, 'state', 'owner', 'incarnation')
if not m[1] or m[1] ~= 'open' then return 0 end
if m[2] ~= ARGV[2] or tonumber(m[3]) ~= tonumber(ARGV[3]) then
  fail('LEASE_LOST', 'lease is held by ' .. m[2] .. '#' .. m[3])
end
redis.call('HSET', meta, 'state', ARGV[4])
redis.call('HINCRBY', meta, 'generation', 1)
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('PEXPIRE', meta, ARGV[5])
for i = 4, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[5]) end
return 1

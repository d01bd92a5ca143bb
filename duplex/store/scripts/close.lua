-- End a session (duplex.lease.end). Returns {1, its bytes} only for the call that
-- ended it, {0} when it had ended already (its admission slot may be freed: a
-- retry after a lost reply), {2} while another claimer ends it (finish_expiry:
-- the slot is theirs to free). Keys linger so a late resume learns it ended.
-- The owner may also end a session it claimed for expiry itself (claim_expired).
-- KEYS: meta, leases, expiring, then the other session keys to expire
-- ARGV: sid, owner, incarnation, end state, keep_ms
local meta = KEYS[1]
local m = redis.call('HMGET', meta, 'state', 'owner', 'incarnation', 'expiring_by')
local own_claim = m[1] == 'expiring' and m[4] == ARGV[2]
if not m[1] or (m[1] ~= 'open' and m[1] ~= 'expiring') then return {0} end
if m[1] == 'expiring' and not own_claim then return {2} end
if m[2] ~= ARGV[2] or tonumber(m[3]) ~= tonumber(ARGV[3]) then
  fail('LEASE_LOST', 'lease is held by ' .. m[2] .. '#' .. m[3])
end
redis.call('HSET', meta, 'state', ARGV[4])
redis.call('HINCRBY', meta, 'generation', 1)
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('PEXPIRE', meta, ARGV[5])
for i = 4, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[5]) end
return {1, usage(meta, unpack(KEYS, 4))}

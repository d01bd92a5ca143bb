-- End a session (duplex.lease.end) and free its admission slot. Returns 1 only
-- for the call that ended it. Keys linger so a late resume learns it ended.
-- The owner may also end a session it claimed for expiry itself (claim_expired).
-- Kept within the store-wide budget of ended sessions (retain, in _lib.lua).
-- KEYS: meta, leases, expiring, owner_sessions, retained, retained sizes, then the
--       other session keys to expire
-- ARGV: sid, owner, incarnation, end state, keep_ms, retained budget (bytes), then
--       the printf names of a session's keys
local meta = KEYS[1]
local m = redis.call('HMGET', meta, 'state', 'owner', 'incarnation', 'expiring_by')
local own_claim = m[1] == 'expiring' and m[4] == ARGV[2]
-- Ended already, or being ended by another claimer (finish_expiry): not this call.
if not m[1] or (m[1] ~= 'open' and not own_claim) then return 0 end
if m[2] ~= ARGV[2] or tonumber(m[3]) ~= tonumber(ARGV[3]) then
  fail('LEASE_LOST', 'lease is held by ' .. m[2] .. '#' .. m[3])
end
redis.call('HSET', meta, 'state', ARGV[4])
redis.call('HINCRBY', meta, 'generation', 1)
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[1])
redis.call('PEXPIRE', meta, ARGV[5])
for i = 7, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[5]) end
retain(KEYS[5], KEYS[6], ARGV[1], tonumber(ARGV[5]), tonumber(ARGV[6]), {unpack(ARGV, 7)})
return 1

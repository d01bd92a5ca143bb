-- Crash recovery (docs/architecture.md §8, duplex.lease.take_over): a process takes a
-- session over once its owner's heartbeat is gone; incarnation+1 fences the old owner's
-- writes out (I3). A second run finds new_owner owning it and changes nothing.
-- The old owner's set is derived from the owner read here (one Redis, not Cluster).
-- KEYS: meta, leases, owners, new owner's sessions
-- ARGV: sid, new_owner, now, owner sessions key template
local meta, sid, new_owner = KEYS[1], ARGV[1], ARGV[2]
local m = redis.call('HMGET', meta, 'state', 'owner')
if not m[1] then fail('NO_SESSION', 'session does not exist') end
if m[1] ~= 'open' then fail('SESSION_CLOSED', 'session has ended (' .. m[1] .. ')') end
if m[2] == new_owner then return redis.call('HGETALL', meta) end
if not owner_dead(KEYS[3], m[2], tonumber(ARGV[3])) then
  fail('OWNER_ALIVE', 'session is owned by live process ' .. m[2])
end
redis.call('HSET', meta, 'owner', new_owner)
redis.call('HINCRBY', meta, 'incarnation', 1)
-- The admission slot moves with the session (max_sessions per owner).
redis.call('SREM', string.format(ARGV[4], m[2]), sid)
redis.call('SADD', KEYS[4], sid)
touch(meta, ARGV[3])
index_lease(KEYS[2], meta, sid)
return redis.call('HGETALL', meta)

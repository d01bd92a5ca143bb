-- Crash recovery (docs/architecture.md §8, duplex.lease.take_over): a process takes a
-- session over once its owner's heartbeat is gone; incarnation+1 fences the old owner's
-- writes out (I3). A second run finds new_owner owning it and changes nothing.
-- The admission slot follows in the {global} slot (readmit.lua).
-- KEYS: meta, leases
-- ARGV: sid, new_owner, now, then the owners alive at now (live_owners)
local meta, sid, new_owner = KEYS[1], ARGV[1], ARGV[2]
local m = redis.call('HMGET', meta, 'state', 'owner')
if not m[1] then fail('NO_SESSION', 'session does not exist') end
if m[1] ~= 'open' then fail('SESSION_CLOSED', 'session has ended (' .. m[1] .. ')') end
if m[2] == new_owner then return redis.call('HGETALL', meta) end
if live_owners(4)[m[2]] then
  fail('OWNER_ALIVE', 'session is owned by live process ' .. m[2])
end
redis.call('HSET', meta, 'owner', new_owner)
redis.call('HINCRBY', meta, 'incarnation', 1)
touch(meta, ARGV[3])
index_lease(KEYS[2], meta, sid)
return redis.call('HGETALL', meta)

-- Heartbeat (duplex.lease.renew): last_activity and the lease deadline.
-- KEYS: meta, leases   ARGV: sid, owner, incarnation, now
local m = read(KEYS[1], 'state', 'owner', 'incarnation', 'expiring_by',
  unpack(LEASE_FIELDS))
check_fence(m, ARGV[2], ARGV[3])
local changes = {}
touch_read(m, changes, KEYS[2], ARGV[1], ARGV[4])
if #changes > 0 then redis.call('HSET', KEYS[1], unpack(changes)) end
return 1

-- Heartbeat (duplex.lease.renew): last_activity and the lease deadline.
-- KEYS: meta, leases   ARGV: sid, owner, incarnation, now
fenced(KEYS[1], ARGV[2], ARGV[3])
touch(KEYS[1], ARGV[4])
index_lease(KEYS[2], KEYS[1], ARGV[1])
return 1

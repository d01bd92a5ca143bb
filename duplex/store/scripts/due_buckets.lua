#!lua flags=allow-cross-slot-keys
-- The reaper's look at every bucket one primary holds, in one call: for each key
-- (a bucket's expiring or leases index), its members due by `now` (ms) with their
-- scores, at most `limit`. Keys of many slots on one server: the flag allows it
-- (Valkey/Redis 7+) as long as the call declares keys of one slot: the first
-- index is declared, for routing, and every index comes as an argument.
-- Standalone: no _lib.lua before the flag line.
-- KEYS: the first index   ARGV: now (ms), limit, then every index
local out = {}
for i = 3, #ARGV do
  out[i - 2] = redis.call('ZRANGEBYSCORE', ARGV[i], '-inf', ARGV[1], 'WITHSCORES',
    'LIMIT', 0, ARGV[2])
end
return out

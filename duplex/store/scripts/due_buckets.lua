#!lua flags=allow-cross-slot-keys
-- The reaper's look at every bucket one primary holds, in one call: for each of
-- the buckets named, its expiring then its leases index, the members due by `now`
-- (ms) with their scores, at most `limit` each. Keys of many slots on one server:
-- the flag allows it (Valkey/Redis 7+) as long as the call declares keys of one
-- slot: one index is declared, for routing, and the rest are named here from
-- their printf templates, so a pass sends a kilobyte, not 512 key names (issue 24:
-- packing and sending those cost the gateway about 1 ms of CPU a pass, every second).
-- Standalone: no _lib.lua before the flag line.
-- KEYS: one index of the first bucket
-- ARGV: now (ms), limit, the expiring index's template, the leases index's
--       template (each with one %03d: the bucket), the buckets ("0 1 2 …")
-- Returns {bucket, kind, {member, score, …}, …} for the indexes with something
-- due alone; kind 0: the expiring index, 1: the leases.
local out = {}
local templates = {ARGV[3], ARGV[4]}
for bucket in string.gmatch(ARGV[5], '%d+') do
  bucket = tonumber(bucket)
  for kind = 1, 2 do
    local due = redis.call('ZRANGEBYSCORE', string.format(templates[kind], bucket),
      '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, ARGV[2])
    if #due > 0 then
      out[#out + 1] = bucket
      out[#out + 1] = kind - 1
      out[#out + 1] = due
    end
  end
end
return out

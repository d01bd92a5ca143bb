-- Admission (docs/architecture.md §4 "Open"): a --max-sessions slot and one of the
-- owner's, counted store-wide in the {global} slot. Returns 1 when this call took
-- the slot, 0 when the session holds it already (a retried open).
-- Sessions claimed for expiry but not yet ended still hold theirs (release.lua).
-- KEYS: admitted, owner_sessions
-- ARGV: sid, owner, now (ms), max_sessions, max_per_owner (0 = no limit)
local admitted, owned, sid, owner = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local held = redis.call('HGET', admitted, sid)
if held then
  if string.match(held, '^%d+:(.*)$') == owner then return 0 end
  fail('SESSION_EXISTS', 'session id ' .. sid .. ' is taken')
end
if redis.call('HLEN', admitted) >= tonumber(ARGV[4]) then
  fail('CAPACITY', 'max_sessions (' .. ARGV[4] .. ') reached')
end
local per_owner = tonumber(ARGV[5])
if per_owner > 0 and redis.call('SCARD', owned) >= per_owner then
  fail('CAPACITY', 'max_sessions per process (' .. ARGV[5] .. ') reached')
end
redis.call('HSET', admitted, sid, ARGV[3] .. ':' .. owner)
redis.call('SADD', owned, sid)
return 1

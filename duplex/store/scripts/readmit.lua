-- The admission slot follows a taken-over session to its new owner (the
-- per-process limit counts it there). A session that holds no slot (ended, or
-- released meanwhile) gets none. Safe to run twice.
-- KEYS: admitted, new owner's sessions   ARGV: sid, new owner, owner sessions template
local admitted, sid, owner = KEYS[1], ARGV[1], ARGV[2]
local held = redis.call('HGET', admitted, sid)
if not held then return 0 end
local since, old = string.match(held, '^(%d+):(.*)$')
if old == owner then return 0 end
redis.call('SREM', string.format(ARGV[3], old), sid)
redis.call('SADD', KEYS[2], sid)
redis.call('HSET', admitted, sid, since .. ':' .. owner)
return 1

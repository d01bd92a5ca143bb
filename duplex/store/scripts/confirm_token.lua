-- The socket of attachment `generation` proved it holds the rotated token (it
-- spoke after session.resumed): the spent token stops working. A stale
-- generation or a second run changes nothing.
-- KEYS: meta   ARGV: generation
local m = redis.call('HMGET', KEYS[1], 'state', 'generation')
if m[1] ~= 'open' or tonumber(m[2]) ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'recovery_digest', '')
return 1

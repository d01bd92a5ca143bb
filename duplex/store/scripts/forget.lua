-- Drop an ended session's keys before their retention runs out (release.lua found
-- the retained sessions over their byte budget). A session that is open again or
-- being ended is left alone.
-- KEYS: the session's keys, meta first
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'open' or state == 'expiring' then return 0 end
return redis.call('DEL', unpack(KEYS))

-- Remove an item; 0 when it was already gone (a retry).
-- KEYS: meta, history, items   ARGV: owner, incarnation, item_id
fenced(KEYS[1], ARGV[1], ARGV[2])
local listed = redis.call('LREM', KEYS[2], 0, ARGV[3])
local stored = redis.call('HDEL', KEYS[3], ARGV[3])
if listed + stored > 0 then return 1 end
return 0

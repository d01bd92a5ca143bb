-- Add a conversation item after previous_item_id ('' = at the end, 'root' = first).
-- An item id that exists only gets its JSON replaced (safe to run twice).
-- KEYS: meta, history, items   ARGV: owner, incarnation, item_id, item_json, previous_item_id
local history, items, id = KEYS[2], KEYS[3], ARGV[3]
fenced(KEYS[1], ARGV[1], ARGV[2])
if redis.call('HEXISTS', items, id) == 1 then
  redis.call('HSET', items, id, ARGV[4])
  return 0
end
local previous = ARGV[5]
if previous == '' then
  redis.call('RPUSH', history, id)
elseif previous == 'root' then
  redis.call('LPUSH', history, id)
elseif redis.call('LINSERT', history, 'AFTER', previous, id) < 1 then
  fail('ITEM_NOT_FOUND', 'previous_item_id ' .. previous .. ' is not in the conversation')
end
redis.call('HSET', items, id, ARGV[4])
return 1

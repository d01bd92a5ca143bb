-- Replace an item's JSON in place (truncation to what was heard, I6).
-- KEYS: meta, items   ARGV: owner, incarnation, item_id, item_json
fenced(KEYS[1], ARGV[1], ARGV[2])
if redis.call('HEXISTS', KEYS[2], ARGV[3]) == 0 then
  fail('ITEM_NOT_FOUND', 'item ' .. ARGV[3] .. ' is not in the conversation')
end
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
return 1

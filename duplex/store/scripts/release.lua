-- A session's --max-sessions slot is freed (it ended, or its open failed), and an
-- ended one joins the retained ones: `retained` (zset: sid -> end ms) and `sizes`
-- (hash: sid -> its bytes, their sum under '*'). Those whose retention ran out
-- leave first; then, while the sum is over the budget, the oldest are dropped
-- from the count and returned: the caller deletes their keys (forget.lua, in
-- their own slots). docs/store.md "Budgets". Safe to run twice.
-- KEYS: admitted, retained, retained sizes
-- ARGV: sid, owner it must hold the slot for ('' = any), the session's bytes ('' =
--       not retained: an open that failed), keep_ms, retained budget (bytes),
--       owner sessions template
local admitted, retained, sizes, sid = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local held = redis.call('HGET', admitted, sid)
if held then
  local owner = string.match(held, '^%d+:(.*)$')
  if ARGV[2] ~= '' and owner ~= ARGV[2] then return {} end
  redis.call('HDEL', admitted, sid)
  redis.call('SREM', string.format(ARGV[6], owner), sid)
end
if ARGV[3] == '' then return {} end

local function forget(old)
  local bytes = tonumber(redis.call('HGET', sizes, old) or '0')
  redis.call('HINCRBY', sizes, '*', -bytes)
  redis.call('HDEL', sizes, old)
end

local keep_ms, budget, bytes = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[3])
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
for _, old in ipairs(redis.call('ZRANGEBYSCORE', retained, '-inf',
                                '(' .. exact(now_ms - keep_ms))) do
  redis.call('ZREM', retained, old)
  forget(old)
end
forget(sid)  -- a second end of the same session counts once
redis.call('ZADD', retained, exact(now_ms), sid)
redis.call('HSET', sizes, sid, bytes)
local total = redis.call('HINCRBY', sizes, '*', bytes)
local dropped = {}
while total > budget do
  local oldest = redis.call('ZPOPMIN', retained)[1]
  if not oldest then break end
  dropped[#dropped + 1] = oldest
  forget(oldest)
  total = tonumber(redis.call('HGET', sizes, '*'))
end
return dropped

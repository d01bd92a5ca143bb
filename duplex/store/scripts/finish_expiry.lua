-- The claimer ends a session it claimed (claim_expired): ONE terminal event at
-- last_seq+1 (I4, I5), state 'expired', keys linger as in close.lua (the caller
-- then frees its admission slot: release.lua). Returns {the terminal's seq, the
-- session's bytes}, or nil when this claimer holds no claim on it (finished
-- already, re-claimed by another, never claimed): a second run appends nothing.
-- KEYS: meta, leases, expiring, journal, history, items
-- ARGV: sid, claimer, event JSON holding '<seq key>0' once, seq key
--       ('"server_event_seq":'), keep_ms, then the terminal event types
local meta, journal = KEYS[1], KEYS[4]
local m = redis.call('HMGET', meta, 'state', 'expiring_by', 'last_seq')
if m[1] ~= 'expiring' or m[2] ~= ARGV[2] then return nil end
local placeholder = ARGV[4] .. '0'
local from, to = string.find(ARGV[3], placeholder, 1, true)
if not from then fail('BAD_EVENT', 'terminal event lacks ' .. placeholder) end

-- The seq of a terminal already at the journal's end: a writer that died
-- between journaling it and ending the session. I5 allows only one.
local function journaled_terminal()
  local top = redis.call('XREVRANGE', journal, '+', '-', 'COUNT', 1)[1]
  if not top then return nil end
  local ok, event = pcall(cjson.decode, top[2][2])
  if not ok or type(event) ~= 'table' then return nil end
  for i = 6, #ARGV do
    if event['type'] == ARGV[i] then return tonumber(string.match(top[1], '^(%d+)%-')) end
  end
  return nil
end

local seq = journaled_terminal()
if not seq then
  seq = tonumber(m[3]) + 1
  local stamped = string.sub(ARGV[3], 1, from - 1) .. ARGV[4] .. string.format('%d', seq)
    .. string.sub(ARGV[3], to + 1)
  redis.call('XADD', journal, string.format('%d-1', seq), 'event', stamped)
  redis.call('HSET', meta, 'last_seq', seq)
end
redis.call('HSET', meta, 'state', 'expired')
redis.call('HINCRBY', meta, 'generation', 1)
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
for i = 1, 6 do
  if i ~= 2 and i ~= 3 then redis.call('PEXPIRE', KEYS[i], ARGV[5]) end
end
return {seq, usage(meta, KEYS[4], KEYS[5], KEYS[6])}

-- I4: journal a contiguous run of server events in one round trip.
-- Seqs already journaled are skipped (a re-sent batch is never stored twice).
-- KEYS: meta, journal, leases
-- ARGV: sid, owner, incarnation, max_len, now ('' = keep), epoch ('' = keep),
--       turn_id ('' = keep), trim_upto ('' = none: trim_journal.lua folded in,
--       so bounding the journal costs no round trip of its own), then pairs of
--       (stream id "<seq>-1", event JSON)
-- The hottest script (a few calls a second a session): the meta hash is read in
-- one HMGET and written in one HSET, so a call runs the XADDs and three or four
-- commands more, not a dozen.
local meta, journal = KEYS[1], KEYS[2]
local m = read(meta, 'state', 'owner', 'incarnation', 'expiring_by', 'last_seq', 'epoch',
  'turn_id', unpack(LEASE_FIELDS))
check_fence(m, ARGV[2], ARGV[3])
local FIRST = 9
local last = tonumber(m.last_seq)

local seqs, prev = {}, nil
for i = FIRST, #ARGV, 2 do
  local seq = tonumber(string.match(ARGV[i], '^(%d+)%-'))
  if prev and seq ~= prev + 1 then
    fail('JOURNAL_GAP', 'batch jumps from seq ' .. prev .. ' to ' .. seq)
  end
  if not prev and seq > last + 1 then
    fail('JOURNAL_GAP', 'seq ' .. seq .. ' does not follow the journaled ' .. last)
  end
  seqs[#seqs + 1], prev = seq, seq
end

for n, seq in ipairs(seqs) do
  if seq > last then
    local at = FIRST + 2 * (n - 1)
    redis.call('XADD', journal, 'MAXLEN', '~', ARGV[4], ARGV[at], 'event', ARGV[at + 1])
  end
end
local changes = {}
if prev and prev > last then
  last = prev
  changes[#changes + 1] = 'last_seq'
  changes[#changes + 1] = last
end
if ARGV[8] ~= '' then  -- as trim_journal.lua: never past last_seq
  local upto = math.min(tonumber(ARGV[8]), last)
  if upto >= 1 then
    redis.call('XTRIM', journal, 'MINID', '=', string.format('%d-0', upto + 1))
  end
end
raise_read(m, changes, 'epoch', ARGV[6])
raise_read(m, changes, 'turn_id', ARGV[7])
if ARGV[5] ~= '' then
  touch_read(m, changes, KEYS[3], ARGV[1], ARGV[5])
end
if #changes > 0 then redis.call('HSET', meta, unpack(changes)) end
return last

-- Drop journaled events up to a seq (client acks, replay window); never past last_seq.
-- KEYS: meta, journal   ARGV: upto_seq
local last = tonumber(redis.call('HGET', KEYS[1], 'last_seq') or '0')
local upto = math.min(tonumber(ARGV[1]), last)
if upto < 1 then return 0 end
return redis.call('XTRIM', KEYS[2], 'MINID', '=', string.format('%d-0', upto + 1))

-- The last journaled seq, read together with a write: WAIT after this script then
-- covers every earlier write on this server (the session's bucket's primary), so
-- events read up to that seq will survive a failover. Without WAIT the write costs
-- one INCR and proves nothing.
-- KEYS: meta, the bucket's barrier   ARGV: (none)
redis.call('INCR', KEYS[2])
return tonumber(redis.call('HGET', KEYS[1], 'last_seq') or '0')

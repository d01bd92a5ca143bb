-- Admission + creation of a session, atomically (docs/architecture.md §4 "Open").
-- KEYS: meta, leases, expiring, owner_sessions
-- ARGV: sid, owner, token_digest, config, now, max_sessions, max_per_owner (0 = no limit),
--       idle_ttl_s ('' = never), grace_s
local meta, leases, expiring, owned = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local sid, owner, digest, now = ARGV[1], ARGV[2], ARGV[3], ARGV[5]

local seen = redis.call('HMGET', meta, 'owner', 'resume_token_digest', 'state')
if seen[1] then
  -- A retried open (same owner, same token) gets back the session it created.
  if seen[1] == owner and seen[2] == digest and seen[3] == 'open' then
    return redis.call('HGETALL', meta)
  end
  fail('SESSION_EXISTS', 'session id ' .. sid .. ' is taken')
end

-- Sessions claimed for expiry but not yet ended still hold their slot.
if redis.call('ZCARD', leases) + redis.call('ZCARD', expiring) >= tonumber(ARGV[6]) then
  fail('CAPACITY', 'max_sessions (' .. ARGV[6] .. ') reached')
end
local per_owner = tonumber(ARGV[7])
if per_owner > 0 and redis.call('SCARD', owned) >= per_owner then
  fail('CAPACITY', 'max_sessions per process (' .. ARGV[7] .. ') reached')
end

redis.call('HSET', meta,
  'state', 'open', 'owner', owner, 'incarnation', 1, 'generation', 1,
  'epoch', 0, 'turn_id', 0, 'last_seq', 0,
  'resume_token_digest', digest, 'config', ARGV[4],
  'created_at', now, 'last_activity', now, 'detached_at', '',
  'grace_s', ARGV[9], 'idle_ttl_s', ARGV[8])
redis.call('SADD', owned, sid)
index_lease(leases, meta, sid)
return redis.call('HGETALL', meta)

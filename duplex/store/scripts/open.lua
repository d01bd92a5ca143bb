-- Creation of a session (docs/architecture.md §4 "Open"), after admit.lua gave it a
-- --max-sessions slot in the {global} slot (a cluster cannot do both in one script).
-- KEYS: meta, leases
-- ARGV: sid, owner, token_digest, config, now, idle_ttl_s ('' = never), grace_s
local meta, leases = KEYS[1], KEYS[2]
local sid, owner, digest, now = ARGV[1], ARGV[2], ARGV[3], ARGV[5]

local seen = redis.call('HMGET', meta, 'owner', 'resume_token_digest', 'state')
if seen[1] then
  -- A retried open (same owner, same token) gets back the session it created.
  if seen[1] == owner and seen[2] == digest and seen[3] == 'open' then
    return redis.call('HGETALL', meta)
  end
  fail('SESSION_EXISTS', 'session id ' .. sid .. ' is taken')
end

redis.call('HSET', meta,
  'state', 'open', 'owner', owner, 'incarnation', 1, 'generation', 1,
  'epoch', 0, 'turn_id', 0, 'last_seq', 0,
  'resume_token_digest', digest, 'config', ARGV[4],
  'created_at', now, 'last_activity', now, 'detached_at', '',
  'grace_s', ARGV[7], 'idle_ttl_s', ARGV[6])
index_lease(leases, meta, sid)
return redis.call('HGETALL', meta)

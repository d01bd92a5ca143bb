-- Attach a new socket: compare-and-swap on generation, rotate the token
-- (duplex.lease.resume). A retry of a resume that already won gets the same answer.
-- The token just spent stays valid as the recovery token until the new socket
-- confirms it holds the rotated one (confirm_token.lua): a handshake lost on
-- the wire must not lock the client out (R16/R17).
-- KEYS: meta, leases
-- ARGV: sid, token_digest, expected_generation, new_token_digest, owner, now
local meta = KEYS[1]
local m = redis.call('HMGET', meta, 'state', 'owner', 'generation', 'resume_token_digest',
  'recovery_digest')
if not m[1] then fail('NO_SESSION', 'session does not exist') end
if m[1] ~= 'open' then fail('SESSION_CLOSED', 'session has ended (' .. m[1] .. ')') end
local generation, expected = tonumber(m[3]), tonumber(ARGV[3])
if m[4] == ARGV[4] and generation == expected + 1 then
  return redis.call('HGETALL', meta)
end
local recovering = m[5] and m[5] ~= '' and m[5] == ARGV[2]
if m[4] ~= ARGV[2] and not recovering then fail('BAD_TOKEN', 'resume_token does not match') end
if m[2] ~= ARGV[5] then fail('LEASE_LOST', 'lease is held by ' .. m[2]) end
if generation ~= expected then
  fail('RESUME_CONFLICT', 'session was resumed by another connection')
end
redis.call('HSET', meta, 'generation', generation + 1, 'detached_at', '',
  'resume_token_digest', ARGV[4], 'recovery_digest', recovering and m[5] or ARGV[2])
touch(meta, ARGV[6])
index_lease(KEYS[2], meta, ARGV[1])
return redis.call('HGETALL', meta)

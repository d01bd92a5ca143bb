-- Shared helpers, prepended to every script at load time (see _scripts.py).
-- Errors are raised as "CODE message"; redis_store maps CODE to a domain error.
-- Checks always come before writes: Redis does not roll a script back.

local function fail(code, message)
  error(redis.error_reply(code .. ' ' .. message))
end

-- I3 (duplex.lease.renew): live first, then owner#incarnation.
local function fenced(meta, owner, incarnation)
  local m = redis.call('HMGET', meta, 'state', 'owner', 'incarnation')
  if not m[1] then fail('NO_SESSION', 'session does not exist') end
  if m[1] ~= 'open' then fail('SESSION_CLOSED', 'session has ended (' .. m[1] .. ')') end
  if m[2] ~= owner or tonumber(m[3]) ~= tonumber(incarnation) then
    fail('LEASE_LOST', 'lease is held by ' .. m[2] .. '#' .. m[3])
  end
end

local function ms(seconds)
  return string.format('%.0f', seconds * 1000)
end

-- duplex.lease.deadline, in ms for the zset; '+inf' when it never expires.
local function deadline_ms(meta)
  local m = redis.call('HMGET', meta, 'detached_at', 'grace_s', 'last_activity', 'idle_ttl_s')
  if m[1] ~= '' then return ms(tonumber(m[1]) + tonumber(m[2])) end
  if m[4] == '' then return '+inf' end
  return ms(tonumber(m[3]) + tonumber(m[4]))
end

local function index_lease(leases, meta, sid)
  redis.call('ZADD', leases, deadline_ms(meta), sid)
end

-- last_activity never goes backwards (a retried or late call is harmless).
local function touch(meta, now)
  local last = tonumber(redis.call('HGET', meta, 'last_activity'))
  if tonumber(now) > last then redis.call('HSET', meta, 'last_activity', now) end
end

-- Monotonic high-water mark of an integer field.
local function raise_to(meta, field, value)
  if value == '' then return end
  if tonumber(value) > tonumber(redis.call('HGET', meta, field)) then
    redis.call('HSET', meta, field, value)
  end
end

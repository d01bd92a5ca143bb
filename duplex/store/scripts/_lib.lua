-- Shared helpers, prepended to every script at load time (see _scripts.py).
-- Errors are raised as "CODE message"; redis_store maps CODE to a domain error.
-- Checks always come before writes: Redis does not roll a script back.

local function fail(code, message)
  error(redis.error_reply(code .. ' ' .. message))
end

-- I3 (duplex.lease.renew): live first, then owner#incarnation. A session its
-- owner claimed for expiry itself ('expiring', expiring_by = owner) still takes
-- the owner's writes: its cleanup and terminal event come before close.lua.
local function fenced(meta, owner, incarnation)
  local m = redis.call('HMGET', meta, 'state', 'owner', 'incarnation', 'expiring_by')
  if not m[1] then fail('NO_SESSION', 'session does not exist') end
  local finishing = m[1] == 'expiring' and m[4] == owner
  if m[1] ~= 'open' and not finishing then
    fail('SESSION_CLOSED', 'session has ended (' .. m[1] .. ')')
  end
  if m[2] ~= owner or tonumber(m[3]) ~= tonumber(incarnation) then
    fail('LEASE_LOST', 'lease is held by ' .. m[2] .. '#' .. m[3])
  end
end

local function ms(seconds)
  return string.format('%.0f', seconds * 1000)
end

-- duplex.lease.deadline in seconds (nil: never) and whether it is the grace of
-- a detached session (duplex.lease.expiry's reason). Meta must exist.
local function lease_due(meta)
  local m = redis.call('HMGET', meta, 'detached_at', 'grace_s', 'last_activity', 'idle_ttl_s')
  if m[1] ~= '' then return tonumber(m[1]) + tonumber(m[2]), true end
  if m[4] == '' then return nil, false end
  return tonumber(m[3]) + tonumber(m[4]), false
end

-- The deadline in ms for the zset; '+inf' when it never expires.
local function deadline_ms(meta)
  local due = lease_due(meta)
  if not due then return '+inf' end
  return ms(due)
end

-- Only open sessions are indexed: a claimed one left dg:leases for dg:expiring
-- and must not come back through its owner's renew or append.
local function index_lease(leases, meta, sid)
  if redis.call('HGET', meta, 'state') ~= 'open' then return end
  redis.call('ZADD', leases, deadline_ms(meta), sid)
end

-- A number as text for a zset range bound, without Lua's 14-digit rounding.
local function exact(number)
  return string.format('%.17g', number)
end

-- An owner is dead when its heartbeat (dg:owners, deadline in ms) is missing or
-- not after now: the same "now >= deadline" as duplex.lease.expiry.
local function owner_dead(owners, owner, now)
  local beat = redis.call('ZSCORE', owners, owner)
  return not beat or tonumber(beat) <= now * 1000
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

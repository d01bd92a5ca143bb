-- Shared helpers, prepended to every script at load time (see _scripts.py).
-- Errors are raised as "CODE message"; redis_store maps CODE to a domain error.
-- Checks always come before writes: Redis does not roll a script back.

local function fail(code, message)
  error(redis.error_reply(code .. ' ' .. message))
end

-- The fields of a session's meta hash, in one HMGET, as a table by name (a field
-- the hash lacks is false).
local function read(meta, ...)
  local names = {...}
  local values = redis.call('HMGET', meta, ...)
  local m = {}
  for i, name in ipairs(names) do m[name] = values[i] end
  return m
end

-- The fields check_fence reads, for read(meta, FENCE_FIELDS..., more).
local FENCE_FIELDS = {'state', 'owner', 'incarnation', 'expiring_by'}

-- I3 (duplex.lease.renew): live first, then owner#incarnation, on fields read
-- with FENCE_FIELDS. A session its owner claimed for expiry itself ('expiring',
-- expiring_by = owner) still takes the owner's writes: its cleanup and terminal
-- event come before close.lua.
local function check_fence(m, owner, incarnation)
  if not m.state then fail('NO_SESSION', 'session does not exist') end
  local finishing = m.state == 'expiring' and m.expiring_by == owner
  if m.state ~= 'open' and not finishing then
    fail('SESSION_CLOSED', 'session has ended (' .. m.state .. ')')
  end
  if m.owner ~= owner or tonumber(m.incarnation) ~= tonumber(incarnation) then
    fail('LEASE_LOST', 'lease is held by ' .. m.owner .. '#' .. m.incarnation)
  end
end

local function fenced(meta, owner, incarnation)
  check_fence(read(meta, unpack(FENCE_FIELDS)), owner, incarnation)
end

local function ms(seconds)
  return string.format('%.0f', seconds * 1000)
end

-- duplex.lease.deadline in seconds (nil: never) and whether it is the grace of
-- a detached session (duplex.lease.expiry's reason), from the LEASE_FIELDS of
-- an existing session.
local LEASE_FIELDS = {'detached_at', 'grace_s', 'last_activity', 'idle_ttl_s'}

local function due_of(m)
  if m.detached_at ~= '' then return tonumber(m.detached_at) + tonumber(m.grace_s), true end
  if m.idle_ttl_s == '' then return nil, false end
  return tonumber(m.last_activity) + tonumber(m.idle_ttl_s), false
end

local function lease_due(meta)
  return due_of(read(meta, unpack(LEASE_FIELDS)))
end

-- The deadline in ms for the zset; '+inf' when it never expires.
local function deadline_of(m)
  local due = due_of(m)
  if not due then return '+inf' end
  return ms(due)
end

-- Only open sessions are indexed: a claimed one left dg:leases for dg:expiring
-- and must not come back through its owner's renew or append.
local function index_lease(leases, meta, sid)
  local m = read(meta, 'state', unpack(LEASE_FIELDS))
  if m.state == 'open' then redis.call('ZADD', leases, deadline_of(m), sid) end
end

-- A number as text for a zset range bound, without Lua's 14-digit rounding.
local function exact(number)
  return string.format('%.17g', number)
end

-- The owners alive at the caller's `now`: ARGV[from..] as a set. The heartbeats
-- live in the {global} slot, which a bucket's script may not touch on a cluster, so
-- the caller reads them first (ZRANGEBYSCORE) and hands them in. A heartbeat that
-- comes back after that read is fenced like any late owner: incarnation+1 (I3).
local function live_owners(from)
  local live = {}
  for i = from, #ARGV do live[ARGV[i]] = true end
  return live
end

-- last_activity never goes backwards (a retried or late call is harmless).
local function touch(meta, now)
  local last = tonumber(redis.call('HGET', meta, 'last_activity'))
  if tonumber(now) > last then redis.call('HSET', meta, 'last_activity', now) end
end

-- The owner's activity at `now` on fields read with FENCE_FIELDS and LEASE_FIELDS
-- (and the state): as touch then index_lease, with the hash writes left to the
-- caller's one HSET (`changes`, name/value pairs).
local function touch_read(m, changes, leases, sid, now)
  if tonumber(now) > tonumber(m.last_activity) then
    m.last_activity = now
    changes[#changes + 1] = 'last_activity'
    changes[#changes + 1] = now
  end
  if m.state == 'open' then redis.call('ZADD', leases, deadline_of(m), sid) end
end

-- Monotonic high-water mark of an integer field read into `m`: its write is
-- added to `changes`.
local function raise_read(m, changes, field, value)
  if value ~= '' and tonumber(value) > tonumber(m[field]) then
    changes[#changes + 1] = field
    changes[#changes + 1] = value
  end
end

-- The bytes a session's keys hold, for the store-wide budget of retained ended
-- sessions (release.lua keeps the count in the {global} slot).
local function usage(...)
  local bytes = 0
  for _, key in ipairs({...}) do bytes = bytes + (redis.call('MEMORY', 'USAGE', key) or 0) end
  return bytes
end

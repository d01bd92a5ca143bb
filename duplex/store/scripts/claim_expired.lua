-- The reaper's claim (docs/architecture.md §4 "Expiry"): hand each overdue session to
-- exactly one claimer, who then ends it (finish_expiry, or the owner's own close.lua).
-- A session goes to its owner, or to anyone once its owner is dead (no live
-- heartbeat: the caller hands in the live owners): a live owner expires its own
-- sessions, with cleanup. One bucket per call (its indexes share the slot of its
-- sessions' keys). Claiming moves the sid from the bucket's leases to its expiring
-- (score: claim deadline),
-- so no later scan finds it; a claim not ended by its deadline (the claimer
-- crashed, or lost this reply) is offered again under the same rule.
-- Per-session keys are derived from the ids read here (the bucket's META template):
-- they share the bucket's hash tag, so its slot.
-- KEYS: the bucket's leases, expiring
-- ARGV: claimer, now, limit, claim_ttl_s, meta key template, then the live owners
-- Returns {sid, reason, owner} triples.
local leases, expiring = KEYS[1], KEYS[2]
local live = live_owners(6)
local claimer, now, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local META = ARGV[5]
local claim_until = ms(now + tonumber(ARGV[4]))
local claimed = {}

local function may_claim(owner)
  return owner == claimer or not live[owner]
end

local function claim(sid, meta, owner, reason)
  redis.call('HSET', meta, 'state', 'expiring', 'expiring_by', claimer,
    'expiring_at', ARGV[2], 'expiry_reason', reason)
  redis.call('ZREM', leases, sid)
  redis.call('ZADD', expiring, claim_until, sid)
  claimed[#claimed + 1] = {sid, reason, owner}
end

-- Abandoned claims first: they are the oldest overdue work.
local function reclaim_abandoned()
  local due = redis.call('ZRANGEBYSCORE', expiring, '-inf', exact(now * 1000),
    'LIMIT', 0, limit)
  for _, sid in ipairs(due) do
    local meta = string.format(META, sid)
    local m = redis.call('HMGET', meta, 'state', 'owner', 'expiry_reason')
    if m[1] ~= 'expiring' then
      redis.call('ZREM', expiring, sid)  -- ended meanwhile, or its keys expired
    elseif #claimed < limit and may_claim(m[2]) then
      claim(sid, meta, m[2], m[3])
    end
  end
end

-- The zset score may be stale (a write that moved the deadline, a lost update):
-- the meta hash decides, as duplex.lease.expiry does (expired when now >= due).
-- Sessions of live foreign owners are skipped, so the scan window is wider
-- than limit to let those not starve the claimer of its own.
local function claim_overdue()
  local due = redis.call('ZRANGEBYSCORE', leases, '-inf', exact(now * 1000),
    'LIMIT', 0, 4 * limit)
  for _, sid in ipairs(due) do
    if #claimed >= limit then return end
    local meta = string.format(META, sid)
    local m = redis.call('HMGET', meta, 'state', 'owner')
    if m[1] ~= 'open' then
      redis.call('ZREM', leases, sid)  -- gone or ended: a stale index entry
    else
      local deadline, detached = lease_due(meta)
      if not deadline or now < deadline then
        index_lease(leases, meta, sid)
      elseif may_claim(m[2]) then
        local reason = 'idle_ttl_expired'
        if detached then reason = 'disconnect_grace_expired' end
        claim(sid, meta, m[2], reason)
      end
    end
  end
end

reclaim_abandoned()
claim_overdue()
return claimed

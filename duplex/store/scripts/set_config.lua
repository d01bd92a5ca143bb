-- Replace the session's config JSON (session.update), fenced (I3). Writing the
-- same value twice is harmless.
-- KEYS: meta   ARGV: owner, incarnation, config
fenced(KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[1], 'config', ARGV[3])
return 1

-- KEYS[1] lock key; ARGV[1] token; ARGV[2] new TTL in milliseconds.
-- Returns 1 when the caller still held the lock and its TTL was reset, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0

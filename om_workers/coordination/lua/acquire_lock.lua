-- KEYS[1] lock key; KEYS[2] pending key; ARGV[1] token; ARGV[2] TTL in milliseconds;
-- ARGV[3] '1' to claim the pending marker in the same step, '0' not to.
-- Returns {taken, pending}: taken is 0 when another token holds the lock (nothing is touched).
-- Otherwise the lock is the caller's (set now, or already holding ARGV[1]: a retried call whose
-- reply was lost) and, when claiming, the pending marker is deleted and its job id returned
-- (false when there is none, or when a lost first reply already claimed it).
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then
  return {0, false}
end
if not owner then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
if ARGV[3] ~= '1' then
  return {1, false}
end
local pending = redis.call('GET', KEYS[2])
if pending then
  redis.call('DEL', KEYS[2])
end
return {1, pending}

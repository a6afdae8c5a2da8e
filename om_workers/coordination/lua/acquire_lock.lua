-- KEYS[1] lock key; KEYS[2] pending key; KEYS[3] the caller's worker (liveness) key.
-- ARGV[1] token ("<worker id>/<hex>"); ARGV[2] lock TTL in milliseconds; ARGV[3] '1' to claim
-- the pending marker in the same step, '0' not to; ARGV[4] the worker key prefix; ARGV[5] the
-- liveness TTL in milliseconds.
-- Returns {taken, pending}: taken is 0 when another token holds the lock and its worker is
-- alive (nothing is touched); 2 when the holder's worker key is gone (its process died) and the
-- lock was taken over; 1 otherwise: the lock is the caller's (set now, or already holding
-- ARGV[1]: a retried call whose reply was lost). When claiming, the pending marker is deleted
-- and its job id returned (false when there is none, or a lost first reply already claimed it).
-- The holder's key is derived from the lock's value, so this script needs a single Redis (not a
-- cluster, where every key must be passed in KEYS).
local owner = redis.call('GET', KEYS[1])
local taken = 1
if owner and owner ~= ARGV[1] then
  local holder = string.match(owner, '^([^/]+)/')
  if not holder or redis.call('EXISTS', ARGV[4] .. holder) == 1 then
    return {0, false}
  end
  taken = 2
end
if taken == 2 or not owner then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
redis.call('SET', KEYS[3], '1', 'PX', ARGV[5])
if ARGV[3] ~= '1' then
  return {taken, false}
end
local pending = redis.call('GET', KEYS[2])
if pending then
  redis.call('DEL', KEYS[2])
end
return {taken, pending}

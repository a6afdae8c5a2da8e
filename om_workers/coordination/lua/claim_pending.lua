-- KEYS[1] lock key; KEYS[2] pending key; ARGV[1] token.
-- Returns {held, pending}: held is 0 when the caller no longer holds the lock (nothing is
-- touched); otherwise the pending marker is deleted and its job id (or false) returned.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, false}
end
local pending = redis.call('GET', KEYS[2])
if pending then
  redis.call('DEL', KEYS[2])
end
return {1, pending}

-- KEYS[1] delivery counter; ARGV[1] TTL in whole seconds. Returns the count after this delivery.
local n = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[1])
return n

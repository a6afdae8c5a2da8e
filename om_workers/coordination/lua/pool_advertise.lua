-- KEYS[1] the worker pool (zset: worker id -> expiry ms); KEYS[2] its slots (hash)
-- ARGV[1] worker id; ARGV[2] task slots (0: leave the pool); ARGV[3] TTL in ms.
-- On Redis's clock, like the fair-dispatch script that reads the pool. Returns the pool's
-- live slots after the change.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(ARGV[2]) > 0 then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
local slots = 0
for _, worker in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')) do
  slots = slots + tonumber(redis.call('HGET', KEYS[2], worker) or '0')
end
return slots

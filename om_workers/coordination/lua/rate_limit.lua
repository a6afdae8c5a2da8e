-- GCRA rate limit: one atomic check-and-update of a key's theoretical arrival time (TAT).
-- Mirrors om_core.policy.rate_limit.decide exactly (integer microseconds); change both together.
-- KEYS[1]  om:rate:{key id}:{class}, value: the TAT in microseconds
-- KEYS[2]  om:throttled, a hash counting each tenant's refused requests
-- ARGV[1]  interval between requests at the sustained rate, microseconds (>= 1)
-- ARGV[2]  burst (>= 1)
-- ARGV[3]  now in microseconds, or "" for Redis's own clock (TIME), so every API replica
--          measures against one clock; tests pass it to compare with the pure function
-- ARGV[4]  the key's tenant id, counted in KEYS[2] when refused ("" counts nothing)
-- ARGV[5]  requests wanted at once (a lease, >= 1; absent: 1); as many pass as would one
--          after another
-- Reply:   {1, 0, new TAT, PX ms, granted} allowed (TAT stored, expiring when the bucket is
--          full), {0, retry_after_us, -1, 0, 0} refused (the bucket untouched; the tenant
--          counted)
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now
if ARGV[3] ~= nil and ARGV[3] ~= '' then
  now = tonumber(ARGV[3])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local tau = interval * (burst - 1)
local tat = tonumber(redis.call('GET', KEYS[1]))
if tat == nil or tat < now then
  tat = now
end
if tat - now > tau then
  if ARGV[4] ~= nil and ARGV[4] ~= '' then redis.call('HINCRBY', KEYS[2], ARGV[4], 1) end
  return {0, tat - tau - now, -1, 0, 0}
end
local wanted = tonumber(ARGV[5]) or 1
if wanted < 1 then wanted = 1 end
local granted = math.min(wanted, math.floor((tau - (tat - now)) / interval) + 1)
local new_tat = tat + granted * interval
local ttl_ms = math.ceil((new_tat - now) / 1000)
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', ttl_ms)
return {1, 0, new_tat, ttl_ms, granted}

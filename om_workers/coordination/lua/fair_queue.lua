-- Fair queueing of flush jobs across tenants: one step of the scheduler, atomic in Redis.
-- Mirrors om_core.fairness.FairQueueModel (change both together): at most `capacity` jobs
-- are admitted (sent to the broker) or running; a freed place goes to the oldest waiting job
-- of the tenant served least lately (its admissions, each decaying by half every half-life),
-- a tenant never served first, ties by id.
-- KEYS[1]  jobs: hash, job id -> JSON [state "w"|"a"|"r", tenant id, session id, worker id]
-- KEYS[2]  ready: zset, tenant id -> its usage, -inf when never served (tenants with waiting
--          jobs; the lowest goes next)
-- KEYS[3]  lines: hash, tenant id -> the key of its list of waiting job ids
-- KEYS[4]  in flight: zset, job id -> ms when admitted (or started)
-- KEYS[5]  in-flight counts: hash, tenant id -> jobs admitted or running
-- KEYS[6]  running counts: hash, tenant id -> jobs running
-- KEYS[7]  usage: zset, tenant id -> log2(decayed admissions) + now / half-life
-- KEYS[8]  backlog: list, one token per job the queue holds (KEDA reads its length)
-- KEYS[9]  worker pool: zset, worker id -> expiry ms; KEYS[10] its slots: hash
-- KEYS[11] "add" and "return" only: the tenant's list of waiting job ids
-- ARGV[1]  op: "add", "start", "done", "return", "sweep", "fill" or "reap"
-- ARGV[2]  job id ("" for sweep and fill); ARGV[3] tenant id and ARGV[4] session id (add)
-- ARGV[5]  capacity, or 0 for the live worker pool's task slots (at least 1)
-- ARGV[6]  sweep only: in-flight entries older than this many ms are forgotten
-- ARGV[7]  start only: the id of the worker process running the job; when that worker's
--          advertisement in the pool expires (it died), its running jobs are forgotten
-- ARGV[8]  half-life of usage, ms
-- ARGV[9]  now in ms, or "" for Redis's own clock (tests pass it to compare with the model)
-- ARGV[10] start and reap: the prefix of worker liveness keys ("" for none); a worker process
--          that is not in the pool (a prefork child: its parent advertises the slots) is
--          alive while its liveness key exists. ARGV[11] start: that key's TTL in ms, set at
--          start when missing (the process's heartbeat keeps it from then on)
-- "reap" forgets the running jobs of processes outside the pool whose liveness key is gone
-- (a killed prefork child), then admits what the capacity allows, like "fill".
-- KEYS[9] .. ':departed' is set when a worker's advertisement is found expired (it died);
-- "departed" clears it and, when it was set, replies with every job admitted but not started
-- (the dead worker may have held their messages: the caller sends them again).
-- Reply: {duplicate, tenant1, session1, job1, tenant2, ...}: the jobs admitted by this step,
-- in order, for the caller to publish; duplicate is 1 when "add" named a job in flight.
local now
if ARGV[9] ~= nil and ARGV[9] ~= '' then
  now = tonumber(ARGV[9])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local op, job = ARGV[1], ARGV[2]
local half_life = tonumber(ARGV[8])
local FORGET_BELOW = -20

local function record(id)
  local raw = redis.call('HGET', KEYS[1], id)
  if not raw then return nil end
  return cjson.decode(raw)
end

local function bump(hash, tenant, by)
  if redis.call('HINCRBY', hash, tenant, by) <= 0 then redis.call('HDEL', hash, tenant) end
end

-- A usage as ZADD takes it: every digit of the double (Lua would print 14), '-inf' for never.
local function score(used)
  if used == -math.huge then return '-inf' end
  return string.format('%.17g', used)
end

local function usage(tenant)
  local used = redis.call('ZSCORE', KEYS[7], tenant)
  if used then return tonumber(used) end
  return -math.huge
end

-- The tenant's place in `ready`, or out of it when nothing of it waits; a tenant with nothing
-- waiting and nothing in flight keeps only its usage.
local function rank(tenant)
  local line = redis.call('HGET', KEYS[3], tenant)
  local waiting = line and redis.call('LLEN', line) or 0
  if waiting > 0 then
    local used = usage(tenant)
    redis.call('ZADD', KEYS[2], score(used), tenant)
    return
  end
  redis.call('ZREM', KEYS[2], tenant)
  if not redis.call('HGET', KEYS[5], tenant) then
    redis.call('HDEL', KEYS[3], tenant)
    redis.call('HDEL', KEYS[6], tenant)
  end
end

local function forget(id, rec)
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[4], id)
  bump(KEYS[5], rec[2], -1)
  if rec[1] == 'r' then bump(KEYS[6], rec[2], -1) end
  redis.call('LPOP', KEYS[8])
  rank(rec[2])
end

local function capacity()
  local fixed = tonumber(ARGV[5])
  if fixed > 0 then return fixed end
  local expired = redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', now)
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[9], '-inf', now)
    redis.call('HDEL', KEYS[10], unpack(expired))
    redis.call('SET', KEYS[9] .. ':departed', '1')
    local dead = {}
    for _, worker in ipairs(expired) do dead[worker] = true end
    for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
      local rec = record(id)
      if rec and rec[1] == 'r' and dead[rec[4]] then forget(id, rec) end
    end
  end
  local slots = 0
  for _, value in ipairs(redis.call('HVALS', KEYS[10])) do slots = slots + tonumber(value) end
  return math.max(1, slots)
end

-- log2(u) + now / half_life after one more admission (om_core.fairness.used_after_admission).
local function used_after_admission(used)
  local t = now / half_life
  if used == -math.huge then return t end
  return t + math.log(2 ^ (used - t) + 1) / math.log(2)
end

local function forget_old_usage()
  local floor = now / half_life + FORGET_BELOW
  local below = '(' .. score(floor)
  local old = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', below)
  if #old == 0 then return end
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', below)
  for _, tenant in ipairs(old) do
    if redis.call('ZSCORE', KEYS[2], tenant) then redis.call('ZADD', KEYS[2], '-inf', tenant) end
  end
end

local duplicate = 0
local rec = nil
if job ~= '' then rec = record(job) end
if op == 'add' then
  if rec then
    if rec[1] ~= 'w' then duplicate = 1 end
  else
    local tenant = ARGV[3]
    redis.call('HSET', KEYS[1], job, cjson.encode({'w', tenant, ARGV[4]}))
    redis.call('HSET', KEYS[3], tenant, KEYS[11])
    redis.call('RPUSH', KEYS[11], job)
    redis.call('RPUSH', KEYS[8], '1')
    rank(tenant)
  end
elseif op == 'start' then
  if rec and rec[1] == 'a' then
    redis.call('HSET', KEYS[1], job, cjson.encode({'r', rec[2], rec[3], ARGV[7]}))
    redis.call('ZADD', KEYS[4], now, job)
    bump(KEYS[6], rec[2], 1)
    local prefix = ARGV[10] or ''
    if prefix ~= '' and ARGV[7] ~= '' and not redis.call('HGET', KEYS[10], ARGV[7]) then
      redis.call('SET', prefix .. ARGV[7], '1', 'PX', tonumber(ARGV[11]), 'NX')
    end
  end
  return {0}
elseif op == 'done' then
  if rec and rec[1] ~= 'w' then forget(job, rec) end
elseif op == 'return' then
  if rec and rec[1] == 'a' then
    redis.call('HSET', KEYS[1], job, cjson.encode({'w', rec[2], rec[3]}))
    redis.call('ZREM', KEYS[4], job)
    bump(KEYS[5], rec[2], -1)
    redis.call('HSET', KEYS[3], rec[2], KEYS[11])
    redis.call('LPUSH', KEYS[11], job)
    rank(rec[2])
  end
  return {0}
elseif op == 'departed' then
  local flag = KEYS[9] .. ':departed'
  if not redis.call('GET', flag) then return {0} end
  redis.call('DEL', flag)
  local reply = {0}
  for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
    local admitted = record(id)
    if admitted and admitted[1] == 'a' then
      reply[#reply + 1] = admitted[2]
      reply[#reply + 1] = admitted[3]
      reply[#reply + 1] = id
    end
  end
  return reply
elseif op == 'reap' then
  local prefix = ARGV[10] or ''
  if prefix ~= '' then
    for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
      local running = record(id)
      if running and running[1] == 'r' and running[4] and running[4] ~= ''
        and not redis.call('HGET', KEYS[10], running[4])
        and redis.call('EXISTS', prefix .. running[4]) == 0 then
        forget(id, running)
      end
    end
  end
elseif op == 'sweep' then
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now - tonumber(ARGV[6]))) do
    local old_rec = record(old)
    if old_rec then forget(old, old_rec) else redis.call('ZREM', KEYS[4], old) end
  end
end

forget_old_usage()
local reply = {duplicate}
local room = capacity() - redis.call('ZCARD', KEYS[4])
while room > 0 do
  local top = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #top == 0 then break end
  local tenant = top[1]
  local line = redis.call('HGET', KEYS[3], tenant)
  local next_job = line and redis.call('LPOP', line)
  local next_rec = next_job and record(next_job)
  if next_rec and next_rec[1] == 'w' then
    redis.call('HSET', KEYS[1], next_job, cjson.encode({'a', tenant, next_rec[3]}))
    redis.call('ZADD', KEYS[4], now, next_job)
    bump(KEYS[5], tenant, 1)
    redis.call('ZADD', KEYS[7], score(used_after_admission(usage(tenant))), tenant)
    reply[#reply + 1] = tenant
    reply[#reply + 1] = next_rec[3]
    reply[#reply + 1] = next_job
    room = room - 1
  end
  rank(tenant)
end
return reply

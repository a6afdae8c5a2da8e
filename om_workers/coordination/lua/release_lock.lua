-- KEYS[1] lock key; KEYS[2] pending key; ARGV[1] token.
-- Returns {released, pending}: released is 1 when the caller held the lock and it was deleted,
-- 0 when someone else holds it or it is gone; pending is the queued job id or false. The pending
-- marker is left in place: the next job claims it, and the caller re-publishes that job because
-- the message that set it may have been dropped while this lock was busy.
local released = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  released = 1
end
return {released, redis.call('GET', KEYS[2])}

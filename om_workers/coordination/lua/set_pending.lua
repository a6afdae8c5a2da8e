-- KEYS[1] pending key; ARGV[1] candidate job id; ARGV[2] TTL in whole seconds.
-- Returns {created, job_id}: created is 1 when ARGV[1] became the pending job, 0 when another
-- job was already pending (its id is returned). One script, so a concurrent claim cannot slip
-- between the failed SET NX and the GET.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  return {1, ARGV[1]}
end
return {0, redis.call('GET', KEYS[1])}

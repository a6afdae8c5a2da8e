-- KEYS[1] key; ARGV[1] expected value. Deletes the key only when it still holds that value.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0

-- The GCRA baseline of bench/resp_bench.sh: the usual Redis + Lua GCRA (the shape of the
-- redis-gcra and redis-cell-less scripts found in the wild: one float "theoretical arrival
-- time" per key, SET with EX). KEYS[1] = the user's key; ARGV = max_burst, count per period,
-- period (s), quantity, as CL.THROTTLE takes them. Returns {limited, limit, remaining,
-- retry_after (s, -1 when allowed), reset_after (s)}, the five values of CL.THROTTLE.
local burst, count, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local interval = period / count
local increment = interval * cost
local burst_offset = interval * (burst + 1)
local t = redis.call('TIME')
local now = t[1] + t[2] / 1000000
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
    tat = now
end
local new_tat = tat + increment
local diff = now - (new_tat - burst_offset)
if diff < 0 then
    return {1, burst + 1, 0, math.ceil(-diff), math.ceil(tat - now)}
end
local reset = new_tat - now
redis.call('SET', KEYS[1], new_tat, 'EX', math.max(1, math.ceil(reset)))
return {0, burst + 1, math.floor(diff / interval), -1, math.ceil(reset)}

-- The baseline of bench/node_bench.sh: the usual Redis + Lua token bucket (the pattern
-- ratelimiter is built to replace). KEYS[1] = the user's key; ARGV = rate, window_ms,
-- burst, cost. Floats, as such scripts are written in the wild.
local rate, window, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local v = redis.call('HMGET', KEYS[1], 't', 'ts')
local tokens = tonumber(v[1]) or burst
local ts = tonumber(v[2]) or now
tokens = math.min(burst, tokens + (now - ts) * rate / window)
local allowed = 0
if tokens >= cost then
    tokens = tokens - cost
    allowed = 1
end
redis.call('HSET', KEYS[1], 't', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(window * burst / rate))
return {allowed, math.floor(tokens)}

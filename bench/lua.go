package bench

// ThrottleLua is the Redis reference implementation used by the comparison: a
// GCRA limiter in Lua that takes the arguments of CL.THROTTLE and returns the
// same five integers [limited, limit, remaining, retry_after, reset_after],
// with redis-cell's arithmetic (spec §2-§4) for sane inputs.
//
//	EVALSHA <sha> 1 <key> <max_burst> <count> <period> [<quantity>]
//
// State is stored like redis-cell stores it: the TAT as an integer count of
// Unix nanoseconds in a plain string, with a PEXPIRE of trunc(ttl/1 ms). The
// clock is Redis TIME (µs resolution), read once per call.
//
// Lua numbers are doubles, exact only below 2^53, and Unix nanoseconds are
// about 2^60. So all instants are kept relative to the current whole second
// (now_s): a stored TAT string is split into its seconds and its last nine
// digits. That is exact while the TAT is within ~100 days of now, which every
// sane parameter set satisfies. Not reproduced: the int64 wrap-around on
// absurd inputs, and T < 1 µs (remaining would be +Inf in redis-cell).
const ThrottleLua = luaPrologueTime + luaStoreRedis + luaBody

// throttleLuaFixedClock is the same body with the clock taken from ARGV[5]
// (Unix ns) and the expiry left to the caller, so that tests can replay the
// conformance vectors, which run on a frozen clock, deterministically.
// Arguments: <key> <max_burst> <count> <period> <quantity> <now_ns>.
const throttleLuaFixedClock = luaPrologueFixed + luaStoreNoTTL + luaBody

const luaPrologueTime = `
if #KEYS ~= 1 or (#ARGV ~= 3 and #ARGV ~= 4) then
  return redis.error_reply('Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]')
end
local t = redis.call('TIME')
local now_s = tonumber(t[1])
local now = tonumber(t[2]) * 1000
`

const luaPrologueFixed = `
if #KEYS ~= 1 or #ARGV ~= 5 then
  return redis.error_reply('Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]')
end
local now_s = tonumber(string.sub(ARGV[5], 1, -10))
local now = tonumber(string.sub(ARGV[5], -9))
`

// store(key, value, ms) writes the new TAT and sets its expiry the way
// redis-cell does through the module API: ms > 0 expires in ms, 0 expires at
// once, -1 leaves the key without a TTL, and below that the value stays
// written with no TTL and the call fails.
const luaStoreRedis = `
local function store(key, val, ms)
  if ms > 0 then
    redis.call('SET', key, val, 'PX', ms)
  elseif ms == 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, val)
    if ms < -1 then return true end
  end
  return false
end
`

const luaStoreNoTTL = `
local function store(key, val, ms)
  redis.call('SET', key, val)
  return ms < -1
end
`

const luaBody = `
local function trunc(x)
  if x >= 0 then return math.floor(x) end
  return math.ceil(x)
end
-- exact truncated division of integer-valued doubles (|a| < 2^53, b > 0)
local function idiv(a, b)
  local neg = a < 0
  if neg then a = -a end
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 end
  if (q + 1) * b <= a then q = q + 1 end
  if neg then return -q end
  return q
end
-- redis-cell's seconds: whole seconds toward zero, plus one if the
-- same-signed remainder is at least 1 ms
local function secs(d)
  local w = idiv(d, 1e9)
  if d - w * 1e9 >= 1e6 then w = w + 1 end
  return w
end
local function int(s)
  if not string.find(s, '^[+-]?%d+$') then return nil end
  local v = tonumber(s)
  if v >= 9223372036854775808 or v < -9223372036854775808 then return nil end
  return v
end

local burst = int(ARGV[1])
if burst == nil then return redis.error_reply("Cell error: Store error: Couldn't parse as integer: " .. ARGV[1]) end
local count = int(ARGV[2])
if count == nil then return redis.error_reply("Cell error: Store error: Couldn't parse as integer: " .. ARGV[2]) end
local period = int(ARGV[3])
if period == nil then return redis.error_reply("Cell error: Store error: Couldn't parse as integer: " .. ARGV[3]) end
local qty = 1
if ARGV[4] ~= nil then
  qty = int(ARGV[4])
  if qty == nil then return redis.error_reply("Cell error: Store error: Couldn't parse as integer: " .. ARGV[4]) end
end

local T = 0
if count ~= 0 and period ~= 0 then T = trunc(period * 1e9 / count) end
if T == 0 then return redis.error_reply('Cell error: Store error: Zero rates are not supported') end

local limit = burst + 1
local tau = T * limit
local inc = T * qty

-- all instants below are ns relative to now_s
local tat = now
local raw = redis.call('GET', KEYS[1])
if raw then
  if not string.find(raw, '^%d+$') then return redis.error_reply('Cell error: invalid digit found in string') end
  local n = string.len(raw)
  if n > 9 then
    tat = (tonumber(string.sub(raw, 1, n - 9)) - now_s) * 1e9 + tonumber(string.sub(raw, n - 8))
  else
    tat = tonumber(raw) - now_s * 1e9
  end
end

local new_tat = inc
if tat > now then new_tat = new_tat + tat else new_tat = new_tat + now end
local diff = now - (new_tat - tau)

local limited, retry, ttl = 0, -1, 0
if diff < 0 then
  limited = 1
  if inc <= tau then retry = secs(-diff) end
  ttl = tat - now
else
  ttl = new_tat - now
  local sec = math.floor(new_tat / 1e9)
  local ns = new_tat - sec * 1e9
  if ns < 0 then sec = sec - 1; ns = ns + 1e9 end
  if ns >= 1e9 then sec = sec + 1; ns = ns - 1e9 end
  if store(KEYS[1], string.format('%d%09d', now_s + sec, ns), idiv(ttl, 1e6)) then
    return redis.error_reply('Cell error: Store error: Error while setting key expire')
  end
end

local remaining = 0
local nxt = tau - ttl
if nxt > -T then
  local us = idiv(T, 1000)
  if us == 0 then
    remaining = 0
    if nxt >= 1000 then remaining = 9223372036854774784 end
  else
    remaining = trunc(idiv(nxt, 1000) / us)
  end
end

return {limited, limit, remaining, retry, secs(ttl)}
`

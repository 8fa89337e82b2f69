-- ratelimiter: the OpenResty (lua-nginx-module) client of a ratelimiter router.
--
-- Speaks wire protocol v1 (docs/PROTOCOL.md) over ngx.socket.tcp cosockets kept in a
-- keepalive pool, and maps replies to HTTP exactly as docs/INTEGRATION.md says.
-- clients/lua/README.md documents the API; in short:
--
--   local rl = require "ratelimiter"
--   rl.configure{ host = "127.0.0.1", port = 7400, token = "...", failure = "open",
--                 failures = { payments = "closed" } }          -- init_by_lua, optional
--   local reply, err = rl.check{ service = "api", user = "u42" } -- any phase with cosockets
--   local status, hdrs = rl.headers(reply, "api", 60, false)    -- pure function
--   rl.access{ service = "api", user = ngx.var.http_x_user }   -- access_by_lua_block
--   rl.header_filter()                                           -- header_filter_by_lua_block
--   rl.adjust{ service = "llm", user = "u42", delta = 250 }      -- settle a cost (ADJUST)
--   rl.conn_access{ service = "export", user = "u42" }          -- access_by_lua_block, and
--   rl.conn_log()                                                -- log_by_lua_block: a
--                                          cluster-wide limit_conn (CHECK, then RELEASE)
--
-- MessagePack is encoded and decoded here rather than with lua-messagepack: the protocol's
-- strict type rules (a float is never an integer, a bin is never a str, a negative value
-- never fits an unsigned field, nothing may follow the value) cannot be checked on what a
-- generic decoder returns, since LuaJIT has one number type and lua-messagepack decodes
-- str and bin alike; and a CHECK has one fixed shape whose nil endpoint a Lua array cannot
-- hold without a sentinel. The encoders and the decoder below are about 170 lines.

local ngx = ngx
local tcp = ngx.socket.tcp
local byte, char, sub, find, format, gsub = string.byte, string.char, string.sub, string.find,
    string.format, string.gsub
local concat = table.concat
local floor, ceil = math.floor, math.ceil
local type, tostring, pairs, next, setmetatable = type, tostring, pairs, next, setmetatable

local _M = { _VERSION = "1.0" }

-- ---- constants ------------------------------------------------------------------------

local OP_CHECK, OP_AUTH, OP_ADJUST, OP_RELEASE, OP_ERROR = 1, 6, 9, 10, 255
local OP_NAMES = { [OP_CHECK] = "CHECK", [OP_ADJUST] = "ADJUST", [OP_RELEASE] = "RELEASE" }
local MAX_FRAME = 65536
local MAX_ID = 4294967295
local MAX_COST = 1000000
local RETRY_NEVER = 4294967295  -- retry_after_ms of a request that can never be allowed
-- What the client takes from a server (docs/CLIENTS.md, "What a client accepts from a
-- server"): no header carries more seconds than RETRY_NEVER rounded up.
local MAX_HEADER_S = 4294968

local CODE_NAMES = {
    [0] = "ALLOWED", [1] = "LIMITED", [2] = "FAIL_OPEN", [3] = "FAIL_CLOSED",
    [4] = "NO_RULE", [5] = "QUEUED",
}
local ERROR_NAMES = {
    [1] = "MALFORMED", [2] = "UNKNOWN_OP", [3] = "BAD_FIELD", [4] = "OVERLOADED",
    [5] = "UNAUTHORIZED", [6] = "NOT_OWNER", [7] = "MOVING",
}
local ERR_MOVING = 7
_M.ALLOWED, _M.LIMITED, _M.FAIL_OPEN, _M.FAIL_CLOSED, _M.NO_RULE, _M.QUEUED = 0, 1, 2, 3, 4, 5
_M.CODE_NAMES = CODE_NAMES

-- ---- configuration --------------------------------------------------------------------

local defaults = {
    host = "127.0.0.1",      -- router address, or "unix:/path/to.sock"
    port = 7400,
    timeout = 200,           -- ms: the whole call (connect, send, reads, the retry), one
                             -- deadline; connect_timeout, send_timeout, read_timeout (each
                             -- step's own cap, within it) default to it
    connect_timeout = nil,
    send_timeout = nil,
    read_timeout = nil,
    pool = nil,              -- keepalive pool name; default "ratelimiter:HOST:PORT[:md5(token)]"
    pool_size = 64,          -- connections kept idle per pool and worker
    backlog = nil,           -- connect() waiters once pool_size connections are busy
    keepalive_timeout = 60000, -- ms an idle pooled connection is kept (< the router's 5 min)
    token = nil,             -- AUTH token, sent once per new connection
    tls = false,             -- TLS to the router (its [cluster] tls_*): the server's
                             -- certificate is checked against nginx's
                             -- lua_ssl_trusted_certificate (chain only, no name)
    tls_server_name = nil,   -- with tls: also check the certificate names this host
    failure = "open",        -- the router cannot be reached: "open" (pass) or "closed" (503)
    failures = {},           -- per service: { payments = "closed" }
    legacy = false,          -- also send X-RateLimit-Limit/-Remaining/-Reset
    windows = {},            -- per service: the rule's window in seconds, for w=
    names = {},              -- per service: the policy name (default: the service)
    max_queue_delay = 10000, -- ms: a longer QUEUED wait is not held; check() says LIMITED
}

local VALID = {
    host = "string", port = "number", timeout = "number", connect_timeout = "number",
    send_timeout = "number", read_timeout = "number", pool = "string", pool_size = "number",
    backlog = "number", keepalive_timeout = "number", token = "string", failure = "string",
    tls = "boolean", tls_server_name = "string",
    failures = "table", legacy = "boolean", windows = "table", names = "table",
    max_queue_delay = "number",
}

-- Sets the defaults every call uses (call it from init_by_lua* or init_worker_by_lua*).
-- Unknown keys and wrong types raise an error, so a typo does not pass silently.
function _M.configure(conf)
    for k, v in pairs(conf) do
        if VALID[k] == nil then
            error("ratelimiter.configure: unknown option " .. tostring(k), 2)
        end
        if type(v) ~= VALID[k] then
            error("ratelimiter.configure: " .. k .. " must be a " .. VALID[k], 2)
        end
        if k == "failure" and v ~= "open" and v ~= "closed" then
            error('ratelimiter.configure: failure must be "open" or "closed"', 2)
        end
        if k == "timeout" and not (v > 0) then
            error("ratelimiter.configure: timeout must be above 0 ms", 2)
        end
        if k == "max_queue_delay" and not (v >= 0 and v <= RETRY_NEVER) then
            error("ratelimiter.configure: max_queue_delay must be 0..4294967295 ms", 2)
        end
        defaults[k] = v
    end
    for svc, pol in pairs(defaults.failures) do
        if pol ~= "open" and pol ~= "closed" then
            error('ratelimiter.configure: failures[' .. tostring(svc) ..
                  '] must be "open" or "closed"', 2)
        end
    end
end

function _M.defaults()
    return defaults
end

local function opt(opts, k)
    local v = opts[k]
    if v == nil then
        v = defaults[k]
    end
    return v
end

-- ---- MessagePack: the two requests this client sends ----------------------------------

local function enc_uint(n)
    if n < 128 then
        return char(n)
    elseif n < 256 then
        return char(0xcc, n)
    elseif n < 65536 then
        return char(0xcd, floor(n / 256), n % 256)
    end
    return char(0xce, floor(n / 16777216), floor(n / 65536) % 256, floor(n / 256) % 256,
                n % 256)
end

-- a signed integer (ADJUST's delta): negative ones as negative fixint, int8, int16, int32
local function enc_int(n)
    if n >= 0 then
        return enc_uint(n)
    elseif n >= -32 then
        return char(256 + n)
    elseif n >= -128 then
        return char(0xd0, 256 + n)
    elseif n >= -32768 then
        local u = 65536 + n
        return char(0xd1, floor(u / 256), u % 256)
    end
    local u = 4294967296 + n
    return char(0xd2, floor(u / 16777216), floor(u / 65536) % 256, floor(u / 256) % 256,
                u % 256)
end

local function enc_str(s)
    local n = #s
    if n < 32 then
        return char(0xa0 + n) .. s
    elseif n < 256 then
        return char(0xd9, n) .. s
    end
    return char(0xda, floor(n / 256), n % 256) .. s
end

local function frame(payload)
    local n = #payload
    return char(floor(n / 16777216), floor(n / 65536) % 256, floor(n / 256) % 256, n % 256)
        .. payload
end

-- [op, id, service, user, endpoint|nil, amount]: CHECK (cost), ADJUST (delta), RELEASE (count)
local function enc_keyed(op, id, service, user, endpoint, amount)
    return frame(concat({
        "\150", char(op), enc_uint(id), enc_str(service), enc_str(user),
        endpoint == nil and "\192" or enc_str(endpoint), enc_int(amount),
    }))
end

local function enc_check(id, service, user, endpoint, cost)
    return enc_keyed(OP_CHECK, id, service, user, endpoint, cost)
end

-- [6, id, token]
local function enc_auth(id, token)
    return frame("\147\6" .. enc_uint(id) .. enc_str(token))
end

_M._enc_check, _M._enc_auth, _M._enc_keyed = enc_check, enc_auth, enc_keyed -- for tests

-- ---- MessagePack: the replies this client accepts -------------------------------------
-- Each reader returns value, next position; or nil, reason.

local function be(s, pos, n) -- big-endian unsigned of n bytes (n <= 4: exact)
    local v = 0
    for i = pos, pos + n - 1 do
        v = v * 256 + byte(s, i)
    end
    return v
end

-- An unsigned integer in any MessagePack integer format; negative values and floats refused.
-- Values above 2^53 are rounded (LuaJIT numbers are doubles); every reply field is far below.
local function dec_uint(s, pos, len)
    if pos > len then
        return nil, "truncated value"
    end
    local b = byte(s, pos)
    if b < 0x80 then
        return b, pos + 1
    end
    local w
    if b == 0xcc or b == 0xd0 then
        w = 1
    elseif b == 0xcd or b == 0xd1 then
        w = 2
    elseif b == 0xce or b == 0xd2 then
        w = 4
    elseif b == 0xcf or b == 0xd3 then
        w = 8
    else
        return nil, "not an unsigned integer"
    end
    if pos + w > len then
        return nil, "truncated value"
    end
    if b >= 0xd0 and byte(s, pos + 1) >= 0x80 then
        return nil, "negative integer in an unsigned field"
    end
    if w == 8 then
        return be(s, pos + 1, 4) * 4294967296 + be(s, pos + 5, 4), pos + 9
    end
    return be(s, pos + 1, w), pos + 1 + w
end

local function dec_str(s, pos, len)
    if pos > len then
        return nil, "truncated value"
    end
    local b = byte(s, pos)
    local n, at
    if b >= 0xa0 and b <= 0xbf then
        n, at = b - 0xa0, pos + 1
    elseif b == 0xd9 or b == 0xda or b == 0xdb then
        local w = b == 0xd9 and 1 or (b == 0xda and 2 or 4)
        if pos + w > len then
            return nil, "truncated value"
        end
        n, at = be(s, pos + 1, w), pos + 1 + w
    else
        return nil, "not a str"
    end
    if at + n - 1 > len then
        return nil, "length exceeds the frame"
    end
    return sub(s, at, at + n - 1), at + n
end

local function dec_array(s, pos, len)
    if pos > len then
        return nil, "truncated value"
    end
    local b = byte(s, pos)
    if b >= 0x90 and b <= 0x9f then
        return b - 0x90, pos + 1
    elseif b == 0xdc or b == 0xdd then
        local w = b == 0xdc and 2 or 4
        if pos + w > len then
            return nil, "truncated value"
        end
        return be(s, pos + 1, w), pos + 1 + w
    end
    return nil, "not an array"
end

-- Decodes one reply payload: CHECK [1,id,code,limit,remaining,reset,retry] (and ADJUST's and
-- RELEASE's, the same shape under ops 9 and 10),
-- AUTH [6,id,principal] or ERROR [255,id,err,message]. Returns a table with op and id
-- (and the fields), or nil, reason. Anything else, or a byte left over, is refused.
local function dec_reply(s)
    local len = #s
    local n, pos = dec_array(s, 1, len)
    if not n then
        return nil, pos
    end
    local op, id, err
    op, pos = dec_uint(s, pos, len)
    if not op then
        return nil, "op: " .. pos
    end
    id, pos = dec_uint(s, pos, len)
    if not id then
        return nil, "id: " .. pos
    end
    if id > MAX_ID then
        return nil, "id out of range"
    end
    local r = { op = op, id = id }
    if OP_NAMES[op] ~= nil then
        if n ~= 7 then
            return nil, OP_NAMES[op] .. " reply with " .. n .. " elements, not 7"
        end
        local code, limit, remaining, reset_ms, retry
        code, pos = dec_uint(s, pos, len)
        if not code then
            return nil, "code: " .. pos
        end
        if CODE_NAMES[code] == nil then
            return nil, "unknown reply code " .. code
        end
        limit, pos = dec_uint(s, pos, len)
        if not limit then
            return nil, "limit: " .. pos
        end
        remaining, pos = dec_uint(s, pos, len)
        if not remaining then
            return nil, "remaining: " .. pos
        end
        reset_ms, pos = dec_uint(s, pos, len)
        if not reset_ms then
            return nil, "reset_ms: " .. pos
        end
        retry, pos = dec_uint(s, pos, len)
        if not retry then
            return nil, "retry_after_ms: " .. pos
        end
        r.code, r.code_name, r.limit, r.remaining, r.reset_ms, r.retry_after_ms =
            code, CODE_NAMES[code], limit, remaining, reset_ms, retry
    elseif op == OP_AUTH then
        if n ~= 3 then
            return nil, "AUTH reply with " .. n .. " elements, not 3"
        end
        r.principal, pos = dec_str(s, pos, len)
        if not r.principal then
            return nil, "principal: " .. pos
        end
    elseif op == OP_ERROR then
        if n ~= 4 and n ~= 5 then
            return nil, "ERROR reply with " .. n .. " elements, not 4 or 5"
        end
        err, pos = dec_uint(s, pos, len)
        if not err then
            return nil, "err: " .. pos
        end
        if ERROR_NAMES[err] == nil then
            return nil, "unknown error code " .. err
        end
        if n == 5 and err ~= ERR_MOVING then
            return nil, "only a MOVING ERROR has 5 elements"
        end
        r.err, r.err_name = err, ERROR_NAMES[err]
        r.message, pos = dec_str(s, pos, len)
        if not r.message then
            return nil, "message: " .. pos
        end
        if n == 5 then
            -- MOVING's owner: the member name of the node to ask now, "" the same one again
            r.owner, pos = dec_str(s, pos, len)
            if not r.owner then
                return nil, "owner: " .. pos
            end
        end
    else
        return nil, "unexpected op " .. op
    end
    if pos ~= len + 1 then
        return nil, "trailing bytes after the value"
    end
    return r
end

_M._dec_reply = dec_reply -- for tests

-- ---- the exchange ---------------------------------------------------------------------

local last_id = 0
local function next_id()
    last_id = last_id + 1
    if last_id > MAX_ID then
        last_id = 1 -- 0 is what servers use when they cannot read an id
    end
    return last_id
end

local pool_names = {}
local npool_names = 0
local function pool_name(host, port, token, tls)
    if tls then
        -- TLS connections never share a pool with plaintext ones, nor with connections
        -- checked against another name.
        host = "tls:" .. (tls.server_name or "") .. ":" .. host
    end
    local key = token and (host .. ":" .. tostring(port) .. ":" .. token)
        or (host .. ":" .. tostring(port))
    local name = pool_names[key]
    if name == nil then
        -- Connections authenticated with different tokens must never be shared.
        name = "ratelimiter:" .. host .. ":" .. tostring(port)
            .. (token and (":" .. ngx.md5(token)) or "")
        if npool_names < 256 then
            pool_names[key] = name
            npool_names = npool_names + 1
        end
    end
    return name
end

-- Text from a server (an ERROR's message) or from a request (a service taken from a header)
-- made safe for a log line: at most max bytes (then "..."), every control byte (0x00..0x1f,
-- 0x7f) and every byte above 0x7f written as \xNN, so no such text can end the line and
-- forge another, or put a NUL or invalid UTF-8 into error.log. The result is printable ASCII,
-- so applying it twice changes nothing more than once.
local function log_safe(s, max)
    s = tostring(s)
    local cut = false
    if #s > max then
        s, cut = sub(s, 1, max), true
    end
    s = gsub(s, "[%z\1-\31\127-\255]", function(c)
        return format("\\x%02x", byte(c))
    end)
    if cut then
        s = s .. "..."
    end
    return s
end

_M._log_safe = log_safe -- for tests

local MAX_MESSAGE_LOG = 256 -- bytes of an ERROR's message kept in an error string

-- The call's clock: ms, updated now (ngx.now() alone is the event loop's cached time).
local function now_ms()
    ngx.update_time()
    return ngx.now() * 1000
end

-- A step's timeout: its own cap (ms; none when not above 0) within left ms, at least 1 (a
-- cosocket timeout of 0 would mean nginx's lua_socket_*_timeout, 60 s by default).
local function cap(t, left)
    if t ~= nil and t > 0 and t < left then
        left = t
    end
    left = floor(left)
    if left < 1 then
        return 1
    end
    return left
end

-- Before each connect, handshake, send and read: the socket's three timeouts set to the
-- step caps (tm.ct, tm.st, tm.rt) within what remains of the call's deadline (tm.deadline).
-- False once less than 1 ms remains: the step is not started, the call fails with a timeout.
local function arm(sock, tm)
    local left = floor(tm.deadline - now_ms())
    if left < 1 then
        return false
    end
    sock:settimeouts(cap(tm.ct, left), cap(tm.st, left), cap(tm.rt, left))
    return true
end

-- Exactly n bytes, within the deadline: returns them, or nil, err and the bytes that had
-- arrived (a partial read). A cosocket re-arms its read timer whenever bytes arrive, so one
-- receive(n) of a frame a server trickles a byte at a time would last as long as the server
-- likes; each receiveany() here waits at most what remains of the call.
local function receive(sock, n, tm)
    if sock.receiveany == nil then -- lua-nginx-module < 0.10.14: per-read timeouts only
        if not arm(sock, tm) then
            return nil, "timeout", 0
        end
        local data, err, partial = sock:receive(n)
        return data, err, partial and #partial or 0
    end
    local got, parts, first = 0, nil, nil
    while got < n do
        if not arm(sock, tm) then
            return nil, "timeout", got
        end
        local data, err = sock:receiveany(n - got)
        if not data then
            return nil, err, got
        end
        if first == nil then
            first = data
        else
            parts = parts or { first }
            parts[#parts + 1] = data
        end
        got = got + #data
    end
    return parts and concat(parts) or first
end

-- One attempt on one connection, within tm's deadline. Returns reply; or nil, err, retriable
-- (a pooled connection the router had closed before anything came back: the request never
-- reached it). Every failure closes the connection: only a clean exchange goes to the pool.
local function attempt(host, port, copts, tm, idle, pool_size, token, payload, id, tls, op)
    local sock = tcp()
    if not arm(sock, tm) then
        return nil, "connect: timeout"
    end
    local ok, err
    if port == nil then
        ok, err = sock:connect(host, copts)
    else
        ok, err = sock:connect(host, port, copts)
    end
    if not ok then
        return nil, "connect: " .. tostring(err)
    end
    local reused = sock:getreusedtimes() or 0
    if tls and reused == 0 then
        -- A fresh connection: the handshake, the chain checked against
        -- lua_ssl_trusted_certificate (and the name when tls.server_name is set).
        -- pcall: some lua-resty-core / lua-nginx-module pairs raise instead of returning
        -- when verification fails; either way the failure policy answers, never a 500.
        if not arm(sock, tm) then
            sock:close()
            return nil, "TLS: timeout"
        end
        local pok, session, herr = pcall(sock.sslhandshake, sock, nil, tls.server_name, true)
        if not pok or not session then
            sock:close()
            return nil, "TLS: " .. tostring(pok and herr or "handshake refused (" ..
                                             tostring(session) .. ")")
        end
    end
    local auth_id
    local req = payload
    if reused == 0 and token ~= nil then
        auth_id = next_id()
        req = enc_auth(auth_id, token) .. payload
    end
    if not arm(sock, tm) then
        sock:close()
        return nil, "send: timeout"
    end
    local sent
    sent, err = sock:send(req)
    if not sent then
        sock:close()
        return nil, "send: " .. tostring(err), reused > 0 and err ~= "timeout"
    end
    local reply
    local got_any = false
    while reply == nil or auth_id ~= nil do
        local hdr, partial
        hdr, err, partial = receive(sock, 4, tm)
        if not hdr then
            sock:close()
            return nil, "receive: " .. tostring(err),
                reused > 0 and not got_any and partial == 0 and err ~= "timeout"
        end
        got_any = true
        local n = be(hdr, 1, 4)
        if n < 1 or n > MAX_FRAME then
            sock:close()
            return nil, "protocol: frame length " .. n
        end
        local body
        body, err = receive(sock, n, tm)
        if not body then
            sock:close()
            return nil, "receive: " .. tostring(err)
        end
        local r, why = dec_reply(body)
        if not r then
            sock:close()
            return nil, "protocol: " .. why
        end
        if r.op == OP_ERROR then
            sock:close()
            -- the server's text, made safe for a log line (whoever logs this error)
            return nil, (r.id == auth_id and "AUTH refused: " or "router answered ")
                .. r.err_name .. ": " .. log_safe(r.message, MAX_MESSAGE_LOG)
        elseif r.op == OP_AUTH and r.id == auth_id then
            auth_id = nil
        elseif r.op == op and r.id == id and reply == nil then
            reply = r
        else
            sock:close()
            return nil, "protocol: unexpected reply op " .. r.op .. " id " .. r.id
        end
    end
    sock:setkeepalive(idle, pool_size)
    reply.op, reply.id = nil, nil
    return reply
end

-- One request of op (CHECK, ADJUST, RELEASE) with amount (its cost, delta or count, checked
-- by the caller) for opts (check() says which). Returns the reply, or nil and an error.
local function keyed(opts, op, amount)
    local service, user, endpoint = opts.service, opts.user, opts.endpoint
    if type(service) ~= "string" or #service < 1 or #service > 128 then
        return nil, "bad argument: service must be a string of 1..128 bytes"
    end
    if type(user) ~= "string" or #user < 1 or #user > 256 then
        return nil, "bad argument: user must be a string of 1..256 bytes"
    end
    if endpoint ~= nil and (type(endpoint) ~= "string" or #endpoint > 128) then
        return nil, "bad argument: endpoint must be nil or a string of 0..128 bytes"
    end
    local token = opt(opts, "token")
    if token ~= nil and (#token < 1 or #token > 256) then
        return nil, "bad argument: token must be 1..256 bytes"
    end
    local host, port = opt(opts, "host"), opt(opts, "port")
    if find(host, "^unix:") then
        port = nil
    end
    local timeout = opt(opts, "timeout")
    if type(timeout) ~= "number" or not (timeout > 0) then
        return nil, "bad argument: timeout must be a number of ms above 0"
    end
    -- One deadline for the whole call (the retry below included); each step is also capped
    -- by its own option, which defaults to the timeout.
    local tm = {
        deadline = now_ms() + timeout,
        ct = opt(opts, "connect_timeout") or timeout,
        st = opt(opts, "send_timeout") or timeout,
        rt = opt(opts, "read_timeout") or timeout,
    }
    local pool_size = opt(opts, "pool_size")
    local tls = nil
    if opt(opts, "tls") then
        tls = { server_name = opt(opts, "tls_server_name") }
    end
    local copts = {
        pool = opt(opts, "pool") or pool_name(host, port, token, tls),
        pool_size = pool_size,
        backlog = opt(opts, "backlog"),
    }
    local idle = opt(opts, "keepalive_timeout")
    local id = next_id()
    local payload = enc_keyed(op, id, service, user, endpoint, amount)
    local reply, err, retriable = attempt(host, port, copts, tm, idle, pool_size, token,
                                          payload, id, tls, op)
    if reply == nil and retriable then
        -- The pooled connection was dead (the router restarted, or closed it as idle): once
        -- more, on a connection of its own. The request never reached the router, so this
        -- holds for ADJUST and RELEASE too, which must never be sent twice. Within what
        -- remains of the same deadline.
        reply, err = attempt(host, port, copts, tm, idle, pool_size, token, payload, id, tls, op)
    end
    return reply, err
end

local function is_int(n, lo, hi)
    return type(n) == "number" and n >= lo and n <= hi and n == floor(n)
end

-- check(opts): one CHECK. opts.service (str, 1..128 bytes), opts.user (1..256 bytes),
-- opts.endpoint (nil or 0..128 bytes), opts.cost (0..1000000, default 1), and any option of
-- configure() for this call. Returns the reply {code, code_name, limit, remaining, reset_ms,
-- retry_after_ms}, or nil and an error string (bad argument, the router unreachable or
-- slower than the timeouts, an ERROR reply, a reply that breaks the protocol). A QUEUED
-- reply whose wait is above max_queue_delay is returned as LIMITED (code 1), its
-- retry_after_ms at most 4294967295: nothing is held longer than max_queue_delay.
function _M.check(opts)
    local cost = opts.cost
    if cost == nil then
        cost = 1
    end
    if not is_int(cost, 0, MAX_COST) then
        return nil, "bad argument: cost must be an integer of 0..1000000"
    end
    local reply, err = keyed(opts, OP_CHECK, cost)
    if reply ~= nil and reply.code == 5 and reply.retry_after_ms > opt(opts, "max_queue_delay") then
        reply.code, reply.code_name = 1, "LIMITED"
        if reply.retry_after_ms > RETRY_NEVER then
            reply.retry_after_ms = RETRY_NEVER
        end
    end
    return reply, err
end

-- adjust(opts): ADJUST (docs/PROTOCOL.md): settles a cost known after the work on the key a
-- CHECK counted: opts.delta (an integer of -1000000..1000000; > 0 charges, past the limit
-- too, < 0 refunds), service, user, endpoint and options as check(). Returns the reply
-- (code ALLOWED: applied; NO_RULE; or the router's failure policy's code: not applied), or
-- nil and an error. Never re-sent: after a timeout it may or may not have been applied.
function _M.adjust(opts)
    if not is_int(opts.delta, -MAX_COST, MAX_COST) then
        return nil, "bad argument: delta must be an integer of -1000000..1000000"
    end
    return keyed(opts, OP_ADJUST, opts.delta)
end

-- release(opts): RELEASE: gives back opts.count (1..1000000, default 1) slots of the rule's
-- concurrency tiers; the rest as adjust(). Returns the reply (remaining: the slots free).
function _M.release(opts)
    local count = opts.count
    if count == nil then
        count = 1
    end
    if not is_int(count, 1, MAX_COST) then
        return nil, "bad argument: count must be an integer of 1..1000000"
    end
    return keyed(opts, OP_RELEASE, count)
end

-- ---- the HTTP mapping (docs/INTEGRATION.md) -------------------------------------------

local function num(n)
    return format("%.0f", n)
end

-- Whole seconds, rounded up, at most MAX_HEADER_S: a header never carries more than the
-- protocol's "never", whatever the server sent.
local function ceil_s(ms)
    local s = ceil(ms / 1000)
    if s > MAX_HEADER_S then
        return MAX_HEADER_S
    end
    return s
end

-- A structured-field string: quoted, \ and " escaped, every byte outside printable ASCII
-- (0x20..0x7E) replaced by "_" (docs/INTEGRATION.md: the same rule in every client).
local escaped = {}
local nescaped = 0
local function sf_string(name)
    local e = escaped[name]
    if e then
        return e
    end
    local s = gsub(name, "[^\32-\126]", "_")
    e = '"' .. gsub(s, '[\\"]', "\\%0") .. '"'
    if nescaped < 1024 then
        escaped[name] = e
        nescaped = nescaped + 1
    end
    return e
end

_M.sf_string = sf_string

-- headers(reply, name, window_s, legacy) -> status, headers
-- status: nil (pass the request on; for QUEUED after waiting reply.retry_after_ms), 429 or
-- 503. headers: a table of header name -> value, exactly the docs/INTEGRATION.md rows.
-- name is the policy name (a string); window_s the rule's window in seconds or nil; legacy
-- adds X-RateLimit-Limit, -Remaining and -Reset.
function _M.headers(reply, name, window_s, legacy)
    local code = reply.code
    local h = {}
    if code == 2 or code == 4 then -- FAIL_OPEN, NO_RULE: no decision, no headers
        return nil, h
    end
    if code == 3 then -- FAIL_CLOSED
        h["Retry-After"] = num(ceil_s(reply.retry_after_ms))
        return 503, h
    end
    local q = sf_string(name)
    local reset_s = num(ceil_s(reply.reset_ms))
    local limit = num(reply.limit)
    local remaining = num(reply.remaining)
    if window_s ~= nil then
        h["RateLimit-Policy"] = q .. ";q=" .. limit .. ";w=" .. num(window_s)
    else
        h["RateLimit-Policy"] = q .. ";q=" .. limit
    end
    h["RateLimit"] = q .. ";r=" .. remaining .. ";t=" .. reset_s
    if legacy then
        h["X-RateLimit-Limit"] = limit
        h["X-RateLimit-Remaining"] = remaining
        h["X-RateLimit-Reset"] = reset_s
    end
    if code == 1 then -- LIMITED
        h["Retry-After"] = num(ceil_s(reply.retry_after_ms))
        return 429, h
    end
    return nil, h -- ALLOWED, QUEUED
end

-- unreachable(policy) -> status, headers: the client's own answer when check() failed.
function _M.unreachable(policy)
    if policy == "closed" then
        return 503, { ["Retry-After"] = "1" }
    end
    return nil, {}
end

-- ---- access_by_lua ----------------------------------------------------------------------

local warned_at, suppressed = 0, 0
local function warn(service, err)
    local now = ngx.now()
    if now - warned_at >= 1 then
        -- both may hold what a client or a server chose (a service from a header, an
        -- ERROR's message): escaped and bounded, so neither can forge a log line
        ngx.log(ngx.WARN, "ratelimiter: service ", log_safe(service, 128), ": ",
                log_safe(err, 1024),
                suppressed > 0 and (" (" .. suppressed .. " more in the last second)") or "")
        warned_at, suppressed = now, 0
    else
        suppressed = suppressed + 1
    end
end

local CTX_KEY = "ratelimiter_headers"

local function set_headers(h)
    local hdr = ngx.header
    for k, v in pairs(h) do
        hdr[k] = v
    end
end

-- What access() and conn_access() share: the request checked at cost; refusals answered
-- with ngx.exit; QUEUED held. Returns the reply (or nil, err) and the user asked for.
local function admit(opts, cost)
    local service = opts.service
    local user = opts.user
    if user == nil or user == "" then
        user = ngx.var.remote_addr or "-"
    end
    if #user > 256 then
        user = "sha1:" .. ngx.encode_base64(ngx.sha1_bin(user))
    end
    local q = opts
    if user ~= opts.user or cost ~= opts.cost then
        q = setmetatable({ user = user, cost = cost }, { __index = opts })
    end
    local reply, err = _M.check(q)
    local status, h
    if reply == nil then
        warn(service, err)
        local policy = opts.failure
        if policy == nil then
            policy = defaults.failures[service] or defaults.failure
        end
        status, h = _M.unreachable(policy)
    else
        local name = opts.name or defaults.names[service] or service
        local window = opts.window
        if window == nil then
            window = defaults.windows[service]
        end
        local legacy = opts.legacy
        if legacy == nil then
            legacy = defaults.legacy
        end
        status, h = _M.headers(reply, name, window, legacy)
    end
    set_headers(h)
    if status ~= nil then
        return ngx.exit(status)
    end
    if next(h) ~= nil then
        ngx.ctx[CTX_KEY] = h
    end
    if reply ~= nil and reply.code == 5 and reply.retry_after_ms > 0 then
        -- check() returns QUEUED only for a wait of at most max_queue_delay
        ngx.sleep(reply.retry_after_ms / 1000)
    end
    return reply, err, user
end

-- access(opts): for access_by_lua_block. opts as for check() (service required; user
-- defaults to the client address, an empty one too, and one longer than 256 bytes is
-- replaced by "sha1:" and its base64 SHA-1), plus:
--   name     policy name (default names[service], else the service)
--   window   the rule's window in seconds (default windows[service]) for w=
--   legacy   X-RateLimit-* too (default the configured legacy)
--   failure  "open" | "closed" when the router cannot be reached (default
--            failures[service], else the configured failure)
-- Refusals (429, 503) are answered here with ngx.exit; QUEUED sleeps retry_after_ms, then
-- passes; passes set their headers with ngx.header and keep them in ngx.ctx for
-- header_filter(). Returns the reply (or nil, err) when the request passes.
function _M.access(opts)
    local reply, err = admit(opts, opts.cost)
    return reply, err
end

local SLOT_KEY = "ratelimiter_slot"

-- conn_access(opts): for access_by_lua_block, with conn_log() in log_by_lua_block: a
-- cluster-wide limit_conn. Takes opts.count slots (default 1) of the service's concurrency
-- rule (`limit = concurrency N lease D`) with a CHECK of that cost, answered as access()
-- answers (429 with Retry-After while every slot is held; the failure policy when the
-- router cannot be reached), and remembers in ngx.ctx what conn_log() gives back. Only a
-- CHECK that counted (ALLOWED, QUEUED) holds slots to give back.
function _M.conn_access(opts)
    local count = opts.count
    if count == nil then
        count = 1
    end
    if not is_int(count, 1, MAX_COST) then
        error("ratelimiter.conn_access: count must be an integer of 1..1000000", 2)
    end
    local reply, err, user = admit(opts, count)
    if reply ~= nil and (reply.code == 0 or reply.code == 5) then
        ngx.ctx[SLOT_KEY] = setmetatable({ user = user, count = count }, { __index = opts })
    end
    return reply, err
end

local function release_slot(premature, slot)
    local reply, err = _M.release(slot)
    if reply == nil then
        warn(slot.service, "RELEASE: " .. tostring(err))
    end
end

-- conn_log(): for log_by_lua_block (it runs for every request, however it ended: an error
-- of the upstream, a client gone). Gives back the slots conn_access() took, with a RELEASE
-- sent from a zero-delay timer (the log phase has no cosockets). A slot not given back (no
-- timer to be had, the router unreachable, a request whose ngx.ctx an internal redirect
-- reset) is freed by the node when its lease ends.
function _M.conn_log()
    local slot = ngx.ctx[SLOT_KEY]
    if slot == nil then
        return
    end
    ngx.ctx[SLOT_KEY] = nil
    local ok, err = ngx.timer.at(0, release_slot, slot)
    if not ok then
        warn(slot.service, "cannot give a slot back: " .. tostring(err))
    end
end

-- header_filter(): for header_filter_by_lua_block. Sets again the headers access() chose
-- for a request it passed, over any of the same name the upstream sent.
function _M.header_filter()
    local h = ngx.ctx[CTX_KEY]
    if h ~= nil then
        set_headers(h)
    end
end

return _M

/*
 * check_wire: the codec and framing of common/wire*.c. Known-answer tests pin the bytes every
 * process must agree on (the PROTOCOL.md example); the rest walks every error class of
 * docs/PROTOCOL.md with its exact code, fatal flag and id, and a seeded fuzz loop feeds
 * random and mutated payloads. Socket behaviour is the node's and router's tests' business.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "buf.h"
#include "rltest.h"
#include "wire.h"
#include "wire_fast.h"

/* A byte literal and its length, as two arguments. */
#define RAW(...)                                                                                   \
    (const char *)(const unsigned char[]){__VA_ARGS__}, sizeof((const unsigned char[]){__VA_ARGS__})

/* A CHECK payload with the PROTOCOL.md example's fields, split so one can be replaced. */
static const unsigned char check_head[] = {0x96, 0x01, 0x07};
static const unsigned char check_service[] = {0xa8, 'c', 'h', 'e', 'c', 'k', 'o', 'u', 't'};
static const unsigned char check_user[] = {0xa3, 'u', '4', '2'};
static const unsigned char check_endpoint[] = {0xc0};
static const unsigned char check_cost[] = {0x01};

/* Builds the example CHECK payload with field i (0 service .. 3 cost) replaced by raw. */
static size_t
check_with(char *out, int i, const char *raw, size_t rawlen)
{
    const unsigned char *f[4] = {check_service, check_user, check_endpoint, check_cost};
    size_t fl[4] = {sizeof(check_service), sizeof(check_user), sizeof(check_endpoint),
                    sizeof(check_cost)};
    size_t n = sizeof(check_head);
    int k;

    memcpy(out, check_head, n);
    for (k = 0; k < 4; k++) {
        if (k == i) {
            memcpy(out + n, raw, rawlen);
            n += rawlen;
        } else {
            memcpy(out + n, f[k], fl[k]);
            n += fl[k];
        }
    }
    return n;
}

static void
expect_fault(const char *what, const char *p, size_t n, uint32_t err, bool fatal, uint32_t id,
             const char *needle)
{
    struct rl_wire_decoder d;
    struct rl_wire_req req;
    struct rl_wire_fault f;
    int rc;

    RL_CHECK_INT_EQ(rl_wire_decoder_init(&d), 0);
    rc = rl_wire_decode_req(&d, p, n, &req, &f);
    RL_CHECK(rc == -1, "%s: decoded (rc %d)", what, rc);
    RL_CHECK(f.err == err, "%s: err %u (%s), want %u", what, f.err, f.msg, err);
    RL_CHECK(f.fatal == fatal, "%s: fatal %d (%s)", what, f.fatal, f.msg);
    RL_CHECK(f.id == id, "%s: id %u, want %u", what, f.id, id);
    RL_CHECK(f.msg[0] != '\0', "%s: empty message", what);
    if (needle != NULL) {
        RL_CHECK(strstr(f.msg, needle) != NULL, "%s: message '%s' lacks '%s'", what, f.msg, needle);
    }
    /* A frame rejected as not one value never reached msgpack-c, so it allocated nothing. */
    if (fatal) {
        RL_CHECK(msgpack_zone_is_empty(&d.zone), "%s: reached msgpack-c", what);
    }
    rl_wire_decoder_deinit(&d);
}

static void
expect_req(const char *what, const char *p, size_t n, struct rl_wire_req *req)
{
    struct rl_wire_decoder d;
    struct rl_wire_fault f;
    int rc;

    RL_CHECK_INT_EQ(rl_wire_decoder_init(&d), 0);
    rc = rl_wire_decode_req(&d, p, n, req, &f);
    RL_CHECK(rc == 0, "%s: rc %d err %u %s", what, rc, f.err, f.msg);
    rl_wire_decoder_deinit(&d);
}

static bool
str_is(struct rl_wire_str s, const char *want)
{
    return s.ptr != NULL && s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

/* Checks out holds exactly one frame and returns its payload. */
static const char *
one_frame(const struct rl_buf *out, size_t *n)
{
    RL_CHECK_INT_EQ(rl_wire_frame(out->data, out->len, n), 1);
    RL_CHECK_UINT_EQ(*n + RL_WIRE_HDR_LEN, out->len);
    return out->data + RL_WIRE_HDR_LEN;
}

static struct rl_wire_str
mkstr(const char *s, size_t n)
{
    struct rl_wire_str w = {s, (uint32_t)n};
    return w;
}

START_TEST(test_known_answer)
{
    static const unsigned char want[] = {0x00, 0x00, 0x00, 0x12, 0x96, 0x01, 0x07, 0xa8,
                                         0x63, 0x68, 0x65, 0x63, 0x6b, 0x6f, 0x75, 0x74,
                                         0xa3, 0x75, 0x34, 0x32, 0xc0, 0x01};
    static const unsigned char want_reply[] = {0x00, 0x00, 0x00, 0x0a, 0x97, 0x01, 0x07,
                                               0x00, 0x64, 0x63, 0xcd, 0xea, 0x60, 0x00};
    struct rl_wire_req in = {0}, req;
    struct rl_wire_check_reply rin = {7, RL_WIRE_ALLOWED, 100, 99, 60000, 0};
    struct rl_wire_decoder d;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_wire_fault f;
    struct rl_buf out;
    const char *p;
    size_t n;

    in.op = RL_WIRE_OP_CHECK;
    in.id = 7;
    in.service = mkstr("checkout", 8);
    in.user = mkstr("u42", 3);
    in.cost = 1;
    rl_buf_init(&out);
    ck_assert_int_eq(rl_wire_put_check(&out, &in), 0);
    ck_assert_uint_eq(out.len, sizeof(want));
    ck_assert_mem_eq(out.data, want, sizeof(want));

    p = one_frame(&out, &n);
    ck_assert_uint_eq(n, 18);
    ck_assert_int_eq(rl_wire_decoder_init(&d), 0);
    ck_assert_int_eq(rl_wire_decode_req(&d, p, n, &req, &f), 0);
    ck_assert_uint_eq(req.op, RL_WIRE_OP_CHECK);
    ck_assert_uint_eq(req.id, 7);
    ck_assert(str_is(req.service, "checkout"));
    ck_assert(str_is(req.user, "u42"));
    ck_assert_ptr_null(req.endpoint.ptr);
    ck_assert_uint_eq(req.endpoint.len, 0);
    ck_assert_uint_eq(req.cost, 1);
    /* Zero copy: the strings are the frame's own bytes. */
    ck_assert_ptr_eq(req.service.ptr, p + 4);
    ck_assert_ptr_eq(req.user.ptr, p + 13);
    /* A small frame stays within the zone's first chunk: no allocation per frame. */
    ck_assert_uint_le(d.zone.chunk_size - d.zone.chunk_list.free, 512);

    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_check_reply(&out, &rin), 0);
    ck_assert_uint_eq(out.len, sizeof(want_reply));
    ck_assert_mem_eq(out.data, want_reply, sizeof(want_reply));
    p = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_CHECK);
    ck_assert_uint_eq(rep->id, 7);
    ck_assert_uint_eq(rep->check.id, 7);
    ck_assert_uint_eq(rep->check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep->check.limit, 100);
    ck_assert_uint_eq(rep->check.remaining, 99);
    ck_assert_uint_eq(rep->check.reset_ms, 60000);
    ck_assert_uint_eq(rep->check.retry_after_ms, 0);

    rl_wire_decoder_deinit(&d);
    rl_buf_deinit(&out);
    free(rep);
}
END_TEST

START_TEST(test_names)
{
    ck_assert_str_eq(rl_wire_op_name(RL_WIRE_OP_CHECK), "check");
    ck_assert_str_eq(rl_wire_op_name(RL_WIRE_OP_CLOCK), "clock");
    ck_assert_str_eq(rl_wire_op_name(RL_WIRE_OP_ERROR), "error");
    ck_assert_str_eq(rl_wire_op_name(13), "?");
    ck_assert_str_eq(rl_wire_code_name(RL_WIRE_ALLOWED), "allowed");
    ck_assert_str_eq(rl_wire_code_name(RL_WIRE_QUEUED), "queued");
    ck_assert_str_eq(rl_wire_code_name(RL_WIRE_CODE_COUNT), "?");
    ck_assert_str_eq(rl_wire_err_name(RL_WIRE_ERR_MALFORMED), "malformed");
    ck_assert_str_eq(rl_wire_err_name(RL_WIRE_ERR_UNAUTHORIZED), "unauthorized");
    ck_assert_str_eq(rl_wire_err_name(0), "?");
}
END_TEST

/* docs/PROTOCOL.md, whole and NUL-terminated; free it. */
static char *
docs_read(void)
{
    char path[512];
    char *doc = malloc(1 << 20);
    FILE *fp;
    size_t n;

    ck_assert_ptr_nonnull(doc);
    snprintf(path, sizeof(path), "%s/docs/PROTOCOL.md", RL_SOURCE_DIR);
    fp = fopen(path, "r");
    ck_assert_msg(fp != NULL, "cannot open %s", path);
    n = fread(doc, 1, (1 << 20) - 1, fp);
    doc[n] = '\0';
    fclose(fp);
    return doc;
}

/* The X-macros generate the enums and names; this keeps docs/PROTOCOL.md's tables in step. */
START_TEST(test_docs_match)
{
    char row[64];
    char *doc = docs_read();

#define RL_WIRE_ROW(name, v, s)                                                                    \
    snprintf(row, sizeof(row), "| %d | %s |", v, #name);                                           \
    ck_assert_msg(strstr(doc, row) != NULL, "docs/PROTOCOL.md lacks the row '%s'", row);
    RL_WIRE_CODE_MAP(RL_WIRE_ROW)
    RL_WIRE_ERR_MAP(RL_WIRE_ROW)
#undef RL_WIRE_ROW
    free(doc);
}
END_TEST

/* Copies the table cell at *p (up to the next '|', trimmed) into out and moves *p past it. */
static void
docs_cell(const char **p, char *out, size_t size)
{
    const char *bar = strchr(*p, '|');
    const char *a = *p, *b;
    size_t n;

    ck_assert_msg(bar != NULL && memchr(a, '\n', (size_t)(bar - a)) == NULL,
                  "docs/PROTOCOL.md: a row of the op list has too few cells");
    b = bar;
    while (a < b && *a == ' ') {
        a++;
    }
    while (b > a && b[-1] == ' ') {
        b--;
    }
    n = (size_t)(b - a) < size - 1 ? (size_t)(b - a) : size - 1;
    memcpy(out, a, n);
    out[n] = '\0';
    *p = bar + 1;
}

/* Elements of the message a cell shows as `[a, b, [c, d], {e: f}]`; 0 when it shows none. */
static unsigned
docs_arity(const char *cell)
{
    unsigned n = 1;
    int depth = 0;

    if (strncmp(cell, "`[", 2) != 0) {
        return 0;
    }
    for (const char *p = cell + 1; *p != '\0' && *p != '`'; p++) {
        if (*p == '[' || *p == '{') {
            depth++;
        } else if (*p == ']' || *p == '}') {
            depth--;
        } else if (*p == ',' && depth == 1) {
            n++;
        }
    }
    return n;
}

/*
 * docs/PROTOCOL.md's op list ("Messages") and the op table (RL_WIRE_OP_TABLE) are the same
 * rows both ways: every listed op is in the table with its code, name, arity of request and
 * reply, node and router columns, and every op of the table is listed once.
 */
START_TEST(test_docs_ops)
{
    static const char *const routes[] = {
        [RL_WIRE_ROUTE_NONE] = "no",
        [RL_WIRE_ROUTE_FORWARD] = "forward",
        [RL_WIRE_ROUTE_FANOUT] = "fan out",
        [RL_WIRE_ROUTE_SELF] = "self",
    };
    char *doc = docs_read();
    const char *line = strstr(doc, "\n| op | name | request | reply | node | router |\n");
    const struct rl_wire_op_info *ops;
    bool listed[256] = {false};
    size_t nops;

    ck_assert_msg(line != NULL, "docs/PROTOCOL.md has no op list (| op | name | ... |)");
    line = strchr(line + 1, '\n') + 1; /* past the header */
    line = strchr(line, '\n');         /* past the |---| line */
    ck_assert_ptr_nonnull(line);
    for (line++; line[0] == '|'; line = strchr(line, '\n') + 1) {
        char cell[6][192];
        const char *p = line + 1;
        const struct rl_wire_op_info *info;
        unsigned long code;

        ck_assert_ptr_nonnull(strchr(line, '\n'));
        for (int k = 0; k < 6; k++) {
            docs_cell(&p, cell[k], sizeof(cell[k]));
        }
        code = strtoul(cell[0], NULL, 10);
        info = rl_wire_op_info((uint32_t)code);
        ck_assert_msg(info != NULL, "docs/PROTOCOL.md lists op %s (%s), not in the op table",
                      cell[0], cell[1]);
        ck_assert_msg(!listed[code], "docs/PROTOCOL.md lists op %lu twice", code);
        listed[code] = true;
        ck_assert_msg(strcmp(cell[1], info->upper) == 0,
                      "docs/PROTOCOL.md names op %lu %s, the op table %s", code, cell[1],
                      info->upper);
        ck_assert_msg(docs_arity(cell[2]) == info->req_max,
                      "docs/PROTOCOL.md: %s's request has %u elements, the op table %u",
                      info->upper, docs_arity(cell[2]), info->req_max);
        ck_assert_msg(docs_arity(cell[3]) == info->reply_len,
                      "docs/PROTOCOL.md: %s's reply has %u elements, the op table %u", info->upper,
                      docs_arity(cell[3]), info->reply_len);
        ck_assert_msg(strcmp(cell[4], info->node ? "yes" : "no") == 0,
                      "docs/PROTOCOL.md: %s's node column is '%s'", info->upper, cell[4]);
        ck_assert_msg(strcmp(cell[5], routes[info->router]) == 0,
                      "docs/PROTOCOL.md: %s's router column is '%s', the op table's '%s'",
                      info->upper, cell[5], routes[info->router]);
    }
    ops = rl_wire_ops(&nops);
    for (size_t i = 0; i < nops; i++) {
        ck_assert_msg(listed[ops[i].op], "docs/PROTOCOL.md's op list lacks op %u (%s)", ops[i].op,
                      ops[i].upper);
    }
    free(doc);
}
END_TEST

/* The op table's rows as the rest of the code sees them. */
START_TEST(test_op_table)
{
    const struct rl_wire_op_info *ops, *check = rl_wire_op_info(RL_WIRE_OP_CHECK);
    size_t n;

    ck_assert_ptr_nonnull(check);
    ck_assert_str_eq(check->name, "check");
    ck_assert_str_eq(check->upper, "CHECK");
    ck_assert_uint_eq(check->req_min, 6);
    ck_assert_uint_eq(check->reply_len, 7);
    ck_assert(check->node);
    ck_assert_uint_eq(check->router, RL_WIRE_ROUTE_FORWARD);
    ck_assert_ptr_null(rl_wire_op_info(0));
    ck_assert_ptr_nonnull(rl_wire_op_info(RL_WIRE_OP_HOT));
    ck_assert(!rl_wire_op_info(RL_WIRE_OP_HOT)->node);
    ck_assert_uint_eq(rl_wire_op_info(RL_WIRE_OP_HOT)->router, RL_WIRE_ROUTE_SELF);
    ck_assert_ptr_null(rl_wire_op_info(13));
    ck_assert_ptr_null(rl_wire_op_info(256));
    ck_assert_ptr_null(rl_wire_op_info(UINT32_MAX));
    ops = rl_wire_ops(&n);
    ck_assert_uint_gt(n, 0);
    for (size_t i = 0; i < n; i++) {
        ck_assert_ptr_eq(rl_wire_op_info(ops[i].op), &ops[i]);
        ck_assert_str_eq(rl_wire_op_name(ops[i].op), ops[i].name);
        ck_assert_uint_le(ops[i].req_min, ops[i].req_max);
    }
    ck_assert_uint_eq(rl_wire_op_info(RL_WIRE_OP_ERROR)->req_max, 0);
    ck_assert(!rl_wire_op_info(RL_WIRE_OP_ERROR)->node);
}
END_TEST

/* rl_wire_put_req encodes every request op as its own encoder does, and nothing else. */
START_TEST(test_put_req)
{
    struct rl_wire_req in = {0}, req;
    struct rl_buf out, want;
    const struct rl_wire_op_info *ops;
    const char *p;
    size_t n, nops;

    rl_buf_init(&out);
    rl_buf_init(&want);
    in.id = 42;
    in.service = mkstr("web", 3);
    in.user = mkstr("bob", 3);
    in.now_ms = 7;
    in.role = mkstr("router", 6);
    in.token = mkstr("secret", 6);
    in.top = 5;
    in.cost = 1; /* RELEASE's count is 1.. */
    ops = rl_wire_ops(&nops);
    for (size_t i = 0; i < nops; i++) {
        in.op = ops[i].op;
        rl_buf_reset(&out);
        if (ops[i].req_max == 0) {
            ck_assert_int_eq(rl_wire_put_req(&out, &in), -EINVAL);
            ck_assert_uint_eq(out.len, 0);
            continue;
        }
        ck_assert_int_eq(rl_wire_put_req(&out, &in), 0);
        p = one_frame(&out, &n);
        expect_req(ops[i].name, p, n, &req);
        ck_assert_uint_eq(req.op, ops[i].op);
        ck_assert_uint_eq(req.id, 42);
    }
    in.op = RL_WIRE_OP_HELLO;
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_req(&out, &in), 0);
    ck_assert_int_eq(rl_wire_put_hello(&want, 42, "router"), 0);
    ck_assert_uint_eq(out.len, want.len);
    ck_assert_mem_eq(out.data, want.data, want.len);
    in.op = 99;
    ck_assert_int_eq(rl_wire_put_req(&out, &in), -EINVAL);
    in.op = 0;
    ck_assert_int_eq(rl_wire_put_req(&out, &in), -EINVAL);
    rl_buf_deinit(&out);
    rl_buf_deinit(&want);
}
END_TEST

START_TEST(test_roundtrip_requests)
{
    char service[RL_WIRE_SERVICE_MAX], user[RL_WIRE_USER_MAX], endpoint[RL_WIRE_ENDPOINT_MAX];
    struct rl_wire_req in = {0}, req;
    struct rl_buf out;
    const char *p;
    size_t n;
    int i;

    memset(service, 's', sizeof(service));
    memset(user, 'u', sizeof(user));
    memset(endpoint, 'e', sizeof(endpoint));
    rl_buf_init(&out);

    /* Extremes of every field: longest strings, largest id and cost. */
    in.op = RL_WIRE_OP_CHECK;
    in.id = UINT32_MAX;
    in.service = mkstr(service, sizeof(service));
    in.user = mkstr(user, sizeof(user));
    in.endpoint = mkstr(endpoint, sizeof(endpoint));
    in.cost = RL_WIRE_COST_MAX;
    ck_assert_int_eq(rl_wire_put_check(&out, &in), 0);
    p = one_frame(&out, &n);
    expect_req("check max", p, n, &req);
    ck_assert_uint_eq(req.op, RL_WIRE_OP_CHECK);
    ck_assert_uint_eq(req.id, UINT32_MAX);
    ck_assert_uint_eq(req.service.len, sizeof(service));
    ck_assert_mem_eq(req.service.ptr, service, sizeof(service));
    ck_assert_uint_eq(req.user.len, sizeof(user));
    ck_assert_mem_eq(req.user.ptr, user, sizeof(user));
    ck_assert_uint_eq(req.endpoint.len, sizeof(endpoint));
    ck_assert_mem_eq(req.endpoint.ptr, endpoint, sizeof(endpoint));
    ck_assert_uint_eq(req.cost, RL_WIRE_COST_MAX);

    /* Shortest: one-byte strings, "" endpoint (not nil), cost 0, id 0. */
    rl_buf_reset(&out);
    in.id = 0;
    in.service = mkstr("s", 1);
    in.user = mkstr("u", 1);
    in.endpoint = mkstr("", 0);
    in.cost = 0;
    ck_assert_int_eq(rl_wire_put_check(&out, &in), 0);
    p = one_frame(&out, &n);
    expect_req("check min", p, n, &req);
    ck_assert_uint_eq(req.id, 0);
    ck_assert(str_is(req.service, "s"));
    ck_assert(str_is(req.user, "u"));
    ck_assert_ptr_nonnull(req.endpoint.ptr);
    ck_assert_uint_eq(req.endpoint.len, 0);
    ck_assert_uint_eq(req.cost, 0);

    /* Every integer width of the id. */
    {
        static const uint32_t ids[] = {0, 1, 127, 128, 255, 256, 65535, 65536, UINT32_MAX};

        for (i = 0; i < (int)(sizeof(ids) / sizeof(ids[0])); i++) {
            rl_buf_reset(&out);
            RL_CHECK_INT_EQ(rl_wire_put_ping(&out, ids[i]), 0);
            p = one_frame(&out, &n);
            expect_req("ping", p, n, &req);
            RL_CHECK_UINT_EQ(req.op, RL_WIRE_OP_PING);
            RL_CHECK_UINT_EQ(req.id, ids[i]);
        }
    }

    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_stats(&out, 42), 0);
    p = one_frame(&out, &n);
    expect_req("stats", p, n, &req);
    ck_assert_uint_eq(req.op, RL_WIRE_OP_STATS);
    ck_assert_uint_eq(req.id, 42);

    {
        static const uint64_t nows[] = {0, 1, 1700000000000ull, UINT32_MAX + 1ull,
                                        RL_WIRE_CLOCK_MAX};

        for (i = 0; i < (int)(sizeof(nows) / sizeof(nows[0])); i++) {
            rl_buf_reset(&out);
            RL_CHECK_INT_EQ(rl_wire_put_clock(&out, 9, nows[i]), 0);
            p = one_frame(&out, &n);
            expect_req("clock", p, n, &req);
            RL_CHECK_UINT_EQ(req.op, RL_WIRE_OP_CLOCK);
            RL_CHECK_UINT_EQ(req.id, 9);
            RL_CHECK_UINT_EQ(req.now_ms, nows[i]);
        }
    }
    rl_buf_deinit(&out);
}
END_TEST

START_TEST(test_roundtrip_replies)
{
    static const char *keys[] = {"checks", "keys", "neg", "big", "small", ""};
    static const int64_t vals[] = {12345, 0, -1, INT64_MAX, INT64_MIN, 7};
    static const char *many_keys[RL_WIRE_STATS_MAX];
    static int64_t many_vals[RL_WIRE_STATS_MAX];
    struct rl_wire_check_reply rin;
    struct rl_wire_decoder d;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_buf out;
    const char *p;
    size_t n;
    uint32_t c;
    size_t i;

    ck_assert_int_eq(rl_wire_decoder_init(&d), 0);
    rl_buf_init(&out);
    for (c = 0; c < RL_WIRE_CODE_COUNT; c++) {
        rin.id = 1000 + c;
        rin.code = c;
        rin.limit = UINT64_MAX;
        rin.remaining = c;
        rin.reset_ms = UINT32_MAX + 1ull;
        rin.retry_after_ms = RL_WIRE_RETRY_NEVER;
        rl_buf_reset(&out);
        RL_CHECK_INT_EQ(rl_wire_put_check_reply(&out, &rin), 0);
        p = one_frame(&out, &n);
        RL_CHECK_INT_EQ(rl_wire_decode_reply(&d, p, n, rep), 0);
        RL_CHECK_UINT_EQ(rep->op, RL_WIRE_OP_CHECK);
        RL_CHECK_UINT_EQ(rep->id, 1000 + c);
        RL_CHECK_UINT_EQ(rep->check.code, c);
        RL_CHECK_UINT_EQ(rep->check.limit, UINT64_MAX);
        RL_CHECK_UINT_EQ(rep->check.remaining, c);
        RL_CHECK_UINT_EQ(rep->check.reset_ms, UINT32_MAX + 1ull);
        RL_CHECK_UINT_EQ(rep->check.retry_after_ms, RL_WIRE_RETRY_NEVER);
    }

    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_ping_reply(&out, 3, "node-a"), 0);
    p = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_PING);
    ck_assert_uint_eq(rep->id, 3);
    ck_assert(str_is(rep->name, "node-a"));

    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_stats_reply(&out, 4, keys, vals, 6), 0);
    p = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_STATS);
    ck_assert_uint_eq(rep->id, 4);
    ck_assert_uint_eq(rep->nstats, 6);
    for (i = 0; i < 6; i++) {
        RL_CHECK_UINT_EQ(rep->stat_keys[i].len, strlen(keys[i]));
        ck_assert_mem_eq(rep->stat_keys[i].ptr, keys[i], strlen(keys[i]));
        RL_CHECK_INT_EQ(rep->stat_vals[i], vals[i]);
    }

    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_stats_reply(&out, 5, keys, vals, 0), 0);
    p = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->nstats, 0);

    /* The most pairs a client keeps. */
    for (i = 0; i < RL_WIRE_STATS_MAX; i++) {
        many_keys[i] = "some_counter";
        many_vals[i] = (int64_t)i - 100;
    }
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_stats_reply(&out, 6, many_keys, many_vals, RL_WIRE_STATS_MAX), 0);
    p = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->nstats, RL_WIRE_STATS_MAX);
    ck_assert_int_eq(rep->stat_vals[RL_WIRE_STATS_MAX - 1], RL_WIRE_STATS_MAX - 101);

    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_clock_reply(&out, 8, 1700000000123ull), 0);
    p = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_CLOCK);
    ck_assert_uint_eq(rep->id, 8);
    ck_assert_uint_eq(rep->now_ms, 1700000000123ull);

    for (c = RL_WIRE_ERR_MALFORMED; c <= RL_WIRE_ERR_UNAUTHORIZED; c++) {
        rl_buf_reset(&out);
        RL_CHECK_INT_EQ(rl_wire_put_error(&out, c == 1 ? 0 : 77, c, "cost must be ..."), 0);
        p = one_frame(&out, &n);
        RL_CHECK_INT_EQ(rl_wire_decode_reply(&d, p, n, rep), 0);
        RL_CHECK_UINT_EQ(rep->op, RL_WIRE_OP_ERROR);
        RL_CHECK_UINT_EQ(rep->id, c == 1 ? 0 : 77);
        RL_CHECK_UINT_EQ(rep->err, c);
        RL_CHECK(str_is(rep->message, "cost must be ..."));
    }

    rl_wire_decoder_deinit(&d);
    rl_buf_deinit(&out);
    free(rep);
}
END_TEST

START_TEST(test_encode_limits)
{
    static const char *keys[RL_WIRE_STATS_MAX + 1];
    static int64_t vals[RL_WIRE_STATS_MAX + 1];
    char *big = malloc(RL_WIRE_FRAME_MAX + 1);
    struct rl_wire_req in = {0};
    struct rl_buf out;
    size_t n, i;

    memset(big, 'x', RL_WIRE_FRAME_MAX);
    big[RL_WIRE_FRAME_MAX] = '\0';
    for (i = 0; i <= RL_WIRE_STATS_MAX; i++) {
        keys[i] = "k";
    }
    rl_buf_init(&out);
    ck_assert_int_eq(rl_wire_put_ping(&out, 1), 0);
    n = out.len;

    /* A frame that cannot be sent is refused and out is left as it was. */
    in.id = 1;
    in.service = mkstr(big, RL_WIRE_FRAME_MAX);
    in.user = mkstr("u", 1);
    ck_assert_int_eq(rl_wire_put_check(&out, &in), -EMSGSIZE);
    ck_assert_uint_eq(out.len, n);
    ck_assert_int_eq(rl_wire_put_error(&out, 1, RL_WIRE_ERR_BAD_FIELD, big), -EMSGSIZE);
    ck_assert_uint_eq(out.len, n);
    ck_assert_int_eq(rl_wire_put_ping_reply(&out, 1, big), -EMSGSIZE);
    ck_assert_uint_eq(out.len, n);
    ck_assert_int_eq(rl_wire_put_stats_reply(&out, 1, keys, vals, RL_WIRE_STATS_MAX + 1),
                     -EMSGSIZE);
    ck_assert_uint_eq(out.len, n);

    /* Bad requests still encode: the tests of the node send them. */
    in.service = mkstr(big, RL_WIRE_SERVICE_MAX + 1);
    in.cost = RL_WIRE_COST_MAX + 1;
    ck_assert_int_eq(rl_wire_put_check(&out, &in), 0);
    ck_assert_uint_gt(out.len, n);

    /* Frames append after what is there: two in one buffer, both intact. */
    ck_assert_int_eq(rl_wire_frame(out.data, out.len, &i), 1);
    ck_assert_uint_eq(RL_WIRE_HDR_LEN + i, n);
    ck_assert_int_eq(rl_wire_frame(out.data + n, out.len - n, &i), 1);
    ck_assert_uint_eq(n + RL_WIRE_HDR_LEN + i, out.len);

    rl_buf_deinit(&out);
    free(big);
}
END_TEST

START_TEST(test_frame_split)
{
    struct rl_wire_req in = {0}, req;
    struct rl_wire_decoder d;
    struct rl_wire_fault f;
    struct rl_buf out;
    uint32_t want_ops[] = {RL_WIRE_OP_CHECK, RL_WIRE_OP_PING, RL_WIRE_OP_STATS, RL_WIRE_OP_CLOCK};
    size_t ends[4];
    size_t k, pos, n;
    int got, rc;

    rl_buf_init(&out);
    in.id = 1;
    in.service = mkstr("svc", 3);
    in.user = mkstr("user", 4);
    in.endpoint = mkstr("/login", 6);
    in.cost = 3;
    ck_assert_int_eq(rl_wire_put_check(&out, &in), 0);
    ends[0] = out.len;
    ck_assert_int_eq(rl_wire_put_ping(&out, 2), 0);
    ends[1] = out.len;
    ck_assert_int_eq(rl_wire_put_stats(&out, 3), 0);
    ends[2] = out.len;
    ck_assert_int_eq(rl_wire_put_clock(&out, 4, 5), 0);
    ends[3] = out.len;
    ck_assert_int_eq(rl_wire_decoder_init(&d), 0);

    /*
     * Every prefix of the stream, as a reader that has received only that much would see
     * it: whole frames come out, and the partial one (header or payload) asks for more.
     */
    for (k = 0; k <= out.len; k++) {
        pos = 0;
        got = 0;
        while ((rc = rl_wire_frame(out.data + pos, k - pos, &n)) == 1) {
            RL_CHECK_INT_EQ(rl_wire_decode_req(&d, out.data + pos + RL_WIRE_HDR_LEN, n, &req, &f),
                            0);
            RL_CHECK_UINT_EQ(req.op, want_ops[got]);
            RL_CHECK_UINT_EQ(req.id, (uint32_t)got + 1);
            pos += RL_WIRE_HDR_LEN + n;
            RL_CHECK_UINT_EQ(pos, ends[got]);
            got++;
        }
        RL_CHECK_INT_EQ(rc, 0);
        RL_CHECK_UINT_LE(pos, k);
        RL_CHECK_INT_EQ(got, k >= ends[3] ? 4 : k >= ends[2] ? 3 : k >= ends[1] ? 2 : k >= ends[0]);
    }
    rl_wire_decoder_deinit(&d);
    rl_buf_deinit(&out);
}
END_TEST

START_TEST(test_frame_bounds)
{
    size_t n = 12345;
    char *big = calloc(1, RL_WIRE_HDR_LEN + RL_WIRE_FRAME_MAX);

    ck_assert_int_eq(rl_wire_frame(RAW(0x00), &n), 0);
    ck_assert_int_eq(rl_wire_frame(RAW(0x00, 0x00, 0x00), &n), 0);
    ck_assert_int_eq(rl_wire_frame(RAW(0x00, 0x00, 0x00, 0x00), &n), -EPROTO);
    ck_assert_int_eq(rl_wire_frame(RAW(0x00, 0x00, 0x00, 0x00, 0xc0), &n), -EPROTO);
    ck_assert_int_eq(rl_wire_frame(RAW(0x00, 0x01, 0x00, 0x01), &n), -EPROTO);
    ck_assert_int_eq(rl_wire_frame(RAW(0xff, 0xff, 0xff, 0xff), &n), -EPROTO);
    ck_assert_int_eq(rl_wire_frame(RAW(0x80, 0x00, 0x00, 0x01), &n), -EPROTO);
    ck_assert_uint_eq(n, 12345);
    /* The largest frame: incomplete by one byte, then whole. */
    ck_assert_int_eq(rl_wire_frame(RAW(0x00, 0x01, 0x00, 0x00), &n), 0);
    big[1] = 0x01;
    ck_assert_int_eq(rl_wire_frame(big, RL_WIRE_HDR_LEN + RL_WIRE_FRAME_MAX - 1, &n), 0);
    ck_assert_int_eq(rl_wire_frame(big, RL_WIRE_HDR_LEN + RL_WIRE_FRAME_MAX, &n), 1);
    ck_assert_uint_eq(n, RL_WIRE_FRAME_MAX);
    /* A truncated frame needs more; its bytes are never looked at. */
    ck_assert_int_eq(rl_wire_frame(RAW(0x00, 0x00, 0x00, 0x03, 0x92, 0x02), &n), 0);
    ck_assert_int_eq(rl_wire_frame(RAW(0x00, 0x00, 0x00, 0x03, 0x92, 0x02, 0x01), &n), 1);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(rl_wire_frame(RAW(0x00, 0x00, 0x00, 0x01, 0xc1, 0xff), &n), 1);
    ck_assert_uint_eq(n, 1);
    free(big);
}
END_TEST

START_TEST(test_not_one_value)
{
    static const unsigned char ex[] = {0x96, 0x01, 0x07, 0xa8, 0x63, 0x68, 0x65, 0x63, 0x6b,
                                       0x6f, 0x75, 0x74, 0xa3, 0x75, 0x34, 0x32, 0xc0, 0x01};
    char buf[64];
    size_t k;

    expect_fault("empty", "", 0, RL_WIRE_ERR_MALFORMED, true, 0, NULL);
    expect_fault("trailing", RAW(0x92, 0x02, 0x07, 0xc0), RL_WIRE_ERR_MALFORMED, true, 0,
                 "trailing");
    expect_fault("two values", RAW(0x01, 0x02), RL_WIRE_ERR_MALFORMED, true, 0, "trailing");
    expect_fault("0xc1 alone", RAW(0xc1), RL_WIRE_ERR_MALFORMED, true, 0, "0xc1");
    expect_fault("0xc1 inside", RAW(0x93, 0x02, 0x07, 0xc1), RL_WIRE_ERR_MALFORMED, true, 0,
                 "0xc1");
    expect_fault("truncated uint32", RAW(0x92, 0x02, 0xce, 0x00, 0x00), RL_WIRE_ERR_MALFORMED, true,
                 0, "truncated");
    expect_fault("truncated str", RAW(0x93, 0x02, 0x07, 0xa5, 'a', 'b'), RL_WIRE_ERR_MALFORMED,
                 true, 0, NULL);
    expect_fault("truncated fixext", RAW(0xd8, 0x01, 0x00), RL_WIRE_ERR_MALFORMED, true, 0, NULL);
    expect_fault("truncated str8 header", RAW(0xd9), RL_WIRE_ERR_MALFORMED, true, 0, "truncated");
    expect_fault("truncated ext8 type", RAW(0xc7, 0x00), RL_WIRE_ERR_MALFORMED, true, 0,
                 "truncated");
    /* msgpack is prefix-free: no proper prefix of a value is a value. */
    for (k = 0; k < sizeof(ex); k++) {
        expect_fault("example prefix", (const char *)ex, k, RL_WIRE_ERR_MALFORMED, true, 0, NULL);
    }
    memcpy(buf, ex, sizeof(ex));
    buf[sizeof(ex)] = 0x00;
    expect_fault("example plus a byte", buf, sizeof(ex) + 1, RL_WIRE_ERR_MALFORMED, true, 0,
                 "trailing");
}
END_TEST

START_TEST(test_hostile_headers)
{
    static const unsigned char depth_type[] = {0x91, 0x81};
    char *p = malloc(2048);
    struct rl_wire_req req;
    size_t n, k;
    int t;

    expect_fault("array32 of 2^32-1",
                 RAW(0xdd, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02, 0x03, 0x04, 0x05),
                 RL_WIRE_ERR_MALFORMED, true, 0, "count");
    expect_fault("map32 of 2^32-1", RAW(0xdf, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02, 0x03, 0x04, 0x05),
                 RL_WIRE_ERR_MALFORMED, true, 0, "count");
    expect_fault("array16 of 65535", RAW(0xdc, 0xff, 0xff, 0xc0), RL_WIRE_ERR_MALFORMED, true, 0,
                 "count");
    /* A map of n pairs needs 2n values: 3 pairs cannot fit in 5 bytes. */
    expect_fault("fixmap 3 in 5 bytes", RAW(0x83, 0x01, 0x02, 0x03, 0x04, 0x05),
                 RL_WIRE_ERR_MALFORMED, true, 0, "count");
    expect_fault("inner array32", RAW(0x93, 0x02, 0x07, 0xdd, 0x7f, 0xff, 0xff, 0xff, 0xc0),
                 RL_WIRE_ERR_MALFORMED, true, 0, "count");
    expect_fault("str32 of 4 GB", RAW(0xdb, 0xff, 0xff, 0xff, 0xff, 'a', 'b', 'c'),
                 RL_WIRE_ERR_MALFORMED, true, 0, "length");
    expect_fault("bin32 of 4 GB", RAW(0xc6, 0xff, 0xff, 0xff, 0xff, 'a'), RL_WIRE_ERR_MALFORMED,
                 true, 0, "length");
    expect_fault("ext32 of 4 GB", RAW(0xc9, 0xff, 0xff, 0xff, 0xff, 0x01, 'a'),
                 RL_WIRE_ERR_MALFORMED, true, 0, "length");
    expect_fault("str8 past the end", RAW(0x93, 0x02, 0x07, 0xd9, 0x10, 'a'), RL_WIRE_ERR_MALFORMED,
                 true, 0, "length");
    expect_fault("service str32 of 4 GB",
                 RAW(0x96, 0x01, 0x07, 0xdb, 0xff, 0xff, 0xff, 0xff, 0xa1, 'u', 0xc0, 0x01),
                 RL_WIRE_ERR_MALFORMED, true, 0, "length");

    /* 1000 nested arrays, and every depth around the limit, in arrays and maps: one value,
     * so a request of the wrong shape (here no op and id), the connection kept. */
    memset(p, 0x91, 1000);
    p[1000] = (char)0xc0;
    expect_fault("1000 levels", p, 1001, RL_WIRE_ERR_MALFORMED, false, 0, "op and an id");
    for (t = 0; t < 2; t++) {
        for (k = 30; k <= 34; k++) {
            size_t i;

            /* A CHECK whose service is a container k - 1 deep, so the frame is k deep. */
            n = check_with(p, 0, "", 0);
            memmove(p + 3 + (k - 1) * (t + 1) + 1, p + 3, n - 3);
            for (i = 0; i < k - 1; i++) {
                if (depth_type[t] == 0x81) {
                    p[3 + 2 * i] = (char)0x81;
                    p[3 + 2 * i + 1] = 0x00;
                } else {
                    p[3 + i] = (char)0x91;
                }
            }
            p[3 + (k - 1) * (t + 1)] = (char)0xc0;
            n += (k - 1) * (t + 1) + 1;
            if (k <= 32) {
                expect_fault("depth <= 32", p, n, RL_WIRE_ERR_BAD_FIELD, false, 7, "service");
            } else {
                /* past msgpack-c's 32 levels: the field named all the same, id echoed */
                expect_fault("depth > 32", p, n, RL_WIRE_ERR_BAD_FIELD, false, 7,
                             "service nests deeper than 32");
            }
        }
    }
    /* An empty container at depth 33 is refused too, as msgpack-c refuses it. */
    memset(p, 0x91, 32);
    p[32] = (char)0x90;
    expect_fault("empty at 33", p, 33, RL_WIRE_ERR_MALFORMED, false, 0, "op and an id");
    p[31] = (char)0x90;
    expect_fault("empty at 32", p, 32, RL_WIRE_ERR_MALFORMED, false, 0, "op and an id");
    /* A CHECK whose endpoint is 40 arrays deep (a black-box test's): BAD_FIELD naming the
     * endpoint, id 6 echoed, where it was a framing error that closed the connection; and an
     * ADJUST's delta likewise; an unknown op's, UNKNOWN_OP. */
    memcpy(p, "\x96\x01\x06\xa2" "fw" "\xa1" "u", 7);
    memset(p + 7, 0x91, 39);
    p[46] = (char)0x90;
    p[47] = 0x01;
    expect_fault("endpoint 40 deep", p, 48, RL_WIRE_ERR_BAD_FIELD, false, 6,
                 "endpoint nests deeper than 32");
    memcpy(p, "\x96\x09\x06\xa2" "fw" "\xa1" "u" "\xc0", 9);
    memset(p + 9, 0x91, 39);
    p[48] = (char)0x90;
    expect_fault("delta 40 deep", p, 49, RL_WIRE_ERR_BAD_FIELD, false, 6,
                 "delta nests deeper than 32");
    p[1] = 0x63;
    expect_fault("op 99, 40 deep", p, 49, RL_WIRE_ERR_UNKNOWN_OP, false, 6, "unknown op 99");
    free(p);

    /*
     * An honest frame of 65532 nils is one value: msgpack-c allocates for it (24 bytes per
     * element, bounded by the frame), and it is a well-framed non-request.
     */
    p = malloc(RL_WIRE_FRAME_MAX);
    p[0] = (char)0xdc;
    p[1] = (char)0xff;
    p[2] = (char)0xfc;
    memset(p + 3, 0xc0, 65532);
    expect_fault("65532 nils", p, 65535, RL_WIRE_ERR_MALFORMED, false, 0, "id");
    p[2] = (char)0xfd;
    expect_fault("65533 claimed", p, 65535, RL_WIRE_ERR_MALFORMED, true, 0, "count");
    /* An honest big request decodes. */
    p[0] = (char)0xdc;
    p[1] = 0x00;
    p[2] = 0x02;
    p[3] = 0x02;
    p[4] = 0x05;
    expect_req("ping array16", p, 5, &req);
    ck_assert_uint_eq(req.op, RL_WIRE_OP_PING);
    ck_assert_uint_eq(req.id, 5);
    free(p);
}
END_TEST

START_TEST(test_not_a_request)
{
    expect_fault("nil", RAW(0xc0), RL_WIRE_ERR_MALFORMED, false, 0, "not an array");
    expect_fault("int", RAW(0x07), RL_WIRE_ERR_MALFORMED, false, 0, "not an array");
    expect_fault("str", RAW(0xa1, 'x'), RL_WIRE_ERR_MALFORMED, false, 0, "not an array");
    expect_fault("map", RAW(0x82, 0x01, 0x02, 0x03, 0x04), RL_WIRE_ERR_MALFORMED, false, 0,
                 "not an array");
    expect_fault("empty array", RAW(0x90), RL_WIRE_ERR_MALFORMED, false, 0, "op and an id");
    expect_fault("op only", RAW(0x91, 0x02), RL_WIRE_ERR_MALFORMED, false, 0, "op and an id");
    /* An unreadable id is MALFORMED with id 0, whatever the op. */
    expect_fault("id nil", RAW(0x92, 0x02, 0xc0), RL_WIRE_ERR_MALFORMED, false, 0, "id");
    expect_fault("id -1", RAW(0x92, 0x02, 0xff), RL_WIRE_ERR_MALFORMED, false, 0, "id");
    expect_fault("id str", RAW(0x92, 0x02, 0xa1, '7'), RL_WIRE_ERR_MALFORMED, false, 0, "id");
    expect_fault("id float", RAW(0x92, 0x02, 0xcb, 0x40, 0x1c, 0, 0, 0, 0, 0, 0),
                 RL_WIRE_ERR_MALFORMED, false, 0, "id");
    expect_fault("id 2^32", RAW(0x92, 0x02, 0xcf, 0, 0, 0, 0x01, 0, 0, 0, 0), RL_WIRE_ERR_MALFORMED,
                 false, 0, "id");
    expect_fault("id array", RAW(0x92, 0x02, 0x91, 0x07), RL_WIRE_ERR_MALFORMED, false, 0, "id");
    expect_fault("id bad, op bad", RAW(0x92, 0xcc, 0xc8, 0xc3), RL_WIRE_ERR_MALFORMED, false, 0, "id");
    expect_fault("check, id bin",
                 RAW(0x96, 0x01, 0xc4, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01),
                 RL_WIRE_ERR_MALFORMED, false, 0, "id");
}
END_TEST

START_TEST(test_unknown_op)
{
    struct rl_wire_req req;

    expect_fault("op 13", RAW(0x92, 0x0d, 0x05), RL_WIRE_ERR_UNKNOWN_OP, false, 5, "unknown op 13");
    expect_fault("op 255", RAW(0x94, 0xcc, 0xff, 0x05, 0x01, 0xa1, 'x'), RL_WIRE_ERR_UNKNOWN_OP,
                 false, 5, "255");
    expect_fault("op 0", RAW(0x92, 0x00, 0x05), RL_WIRE_ERR_UNKNOWN_OP, false, 5, "positive");
    expect_fault("op -1", RAW(0x92, 0xff, 0x05), RL_WIRE_ERR_UNKNOWN_OP, false, 5, "positive");
    expect_fault("op str", RAW(0x92, 0xa1, '1', 0x05), RL_WIRE_ERR_UNKNOWN_OP, false, 5,
                 "positive");
    expect_fault("op nil", RAW(0x92, 0xc0, 0x05), RL_WIRE_ERR_UNKNOWN_OP, false, 5, "positive");
    expect_fault("op 2^32+1", RAW(0x92, 0xcf, 0, 0, 0, 0x01, 0, 0, 0, 0x01, 0x05),
                 RL_WIRE_ERR_UNKNOWN_OP, false, 5, "unknown op 4294967297");
    expect_fault("op 256", RAW(0x92, 0xcd, 0x01, 0x00, 0xce, 0xff, 0xff, 0xff, 0xff),
                 RL_WIRE_ERR_UNKNOWN_OP, false, UINT32_MAX, "unknown op 256");
    /* Ops and ids in signed or wide formats are still the same numbers. */
    expect_req("op int8", RAW(0x92, 0xd0, 0x02, 0xd3, 0, 0, 0, 0, 0, 0, 0, 0x05), &req);
    ck_assert_uint_eq(req.op, RL_WIRE_OP_PING);
    ck_assert_uint_eq(req.id, 5);
}
END_TEST

START_TEST(test_arity)
{
    expect_fault("check 5", RAW(0x95, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "CHECK takes 6..8 elements");
    expect_fault("check 9",
                 RAW(0x99, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, 0xc0, 0x01, 0x01),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "CHECK takes 6..8 elements");
    expect_fault("check 2", RAW(0x92, 0x01, 0x07), RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "CHECK takes 6..8 elements");
    expect_fault("ping 3", RAW(0x93, 0x02, 0x07, 0xc0), RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "PING takes 2 elements");
    expect_fault("stats 3", RAW(0x93, 0x03, 0x07, 0x00), RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "STATS takes 2 elements");
    expect_fault("clock 2", RAW(0x92, 0x04, 0x07), RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "CLOCK takes 3 elements");
    expect_fault("clock 4", RAW(0x94, 0x04, 0x07, 0x01, 0x02), RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "CLOCK takes 3 elements");
}
END_TEST

/* Replaces CHECK field i with each bad encoding and expects BAD_FIELD naming it. */
static void
expect_bad_field(int i, const char *name, const char *raw, size_t rawlen)
{
    char p[512];
    size_t n = check_with(p, i, raw, rawlen);

    expect_fault(name, p, n, RL_WIRE_ERR_BAD_FIELD, false, 7, name);
}

/* An inline limit: the 7th element of CHECK (docs/PROTOCOL.md, "Inline limits"). */
START_TEST(test_inline_limit)
{
    struct rl_wire_req in, req;
    struct rl_buf out;
    const char *p;
    size_t n;
    static const struct {
        uint8_t algo;
        uint32_t limit;
        uint64_t window;
        uint32_t burst;
        bool has_burst;
    } ok[] = {
        {0, 1, 1, 0, false},          {1, 10, 1000, 0, false},
        /* a year (365 days) and the longest window, past 32 bits: fixed_window and
         * sliding_window_counter */
        {0, 5, 31536000000ull, 0, false}, {2, 7, 31622400000ull, 0, false},
        {0, 9, 4294967296ull, 0, false},
        {2, UINT32_MAX, UINT32_MAX, 0, false}, {3, 100, 60000, 20, true},
        {4, 10, 1000, 5, true},       {5, 3, 500, UINT32_MAX, true},
        {4, 7, 70, 0, false},
    };

    rl_buf_init(&out);
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        memset(&in, 0, sizeof(in));
        in.op = RL_WIRE_OP_CHECK;
        in.id = 9;
        in.service = mkstr("api", 3);
        in.user = mkstr("u1", 2);
        in.cost = 2;
        in.limit.set = true;
        in.limit.algo = ok[i].algo;
        in.limit.limit = ok[i].limit;
        in.limit.window_ms = ok[i].window;
        in.limit.burst = ok[i].burst;
        in.limit.has_burst = ok[i].has_burst;
        out.len = 0;
        ck_assert_int_eq(rl_wire_put_req(&out, &in), 0);
        p = one_frame(&out, &n);
        ck_assert_uint_eq((unsigned char)p[0], 0x97);
        expect_req("inline", p, n, &req);
        ck_assert(req.limit.set);
        ck_assert_uint_eq(req.limit.algo, ok[i].algo);
        ck_assert_uint_eq(req.limit.limit, ok[i].limit);
        ck_assert_uint_eq(req.limit.window_ms, ok[i].window);
        ck_assert_uint_eq(req.limit.has_burst, ok[i].has_burst);
        ck_assert_uint_eq(req.limit.burst, ok[i].has_burst ? ok[i].burst : ok[i].limit);
        ck_assert_uint_eq(req.cost, 2);
        ck_assert(str_is(req.service, "api"));
        /* The fast reader leaves 7-element CHECKs to the full decoder. */
        {
            size_t tail;
            struct rl_wire_req fr;

            ck_assert_int_eq(rl_wire_fast_check(p, n, &fr, &tail), -1);
        }
    }
    /* Without a limit the encoder still sends 6 elements. */
    in.limit.set = false;
    out.len = 0;
    ck_assert_int_eq(rl_wire_put_req(&out, &in), 0);
    p = one_frame(&out, &n);
    ck_assert_uint_eq((unsigned char)p[0], 0x96);
    expect_req("no inline", p, n, &req);
    ck_assert(!req.limit.set);

    /* The tenant (8th element) goes with a limit only, and comes back as sent. */
    in.tenant = 0xdeadbeef;
    out.len = 0;
    ck_assert_int_eq(rl_wire_put_req(&out, &in), 0);
    p = one_frame(&out, &n);
    ck_assert_uint_eq((unsigned char)p[0], 0x96);
    in.limit.set = true;
    out.len = 0;
    ck_assert_int_eq(rl_wire_put_req(&out, &in), 0);
    p = one_frame(&out, &n);
    ck_assert_uint_eq((unsigned char)p[0], 0x98);
    expect_req("tenant", p, n, &req);
    ck_assert(req.limit.set);
    ck_assert_uint_eq(req.tenant, 0xdeadbeef);
    in.tenant = 0;
    out.len = 0;
    ck_assert_int_eq(rl_wire_put_req(&out, &in), 0);
    p = one_frame(&out, &n);
    ck_assert_uint_eq((unsigned char)p[0], 0x97);
    expect_req("tenant 0", p, n, &req);
    ck_assert_uint_eq(req.tenant, 0);
    rl_buf_deinit(&out);
    expect_req("nil tenant", RAW(0x98, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, 0xc0, 0xc0),
               &req);
    ck_assert_uint_eq(req.tenant, 0);
    expect_req("tenant 5", RAW(0x98, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, 0xc0, 0x05),
               &req);
    ck_assert_uint_eq(req.tenant, 5);
    expect_fault("tenant str", RAW(0x98, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, 0xc0, 0xa1,
                                   't'),
                 RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "tenant must be nil or an unsigned integer of 0..4294967295");
    expect_fault("tenant 2^32", RAW(0x98, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, 0xc0, 0xcf,
                                    0, 0, 0, 1, 0, 0, 0, 0),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "tenant must be nil");
    /* The router's probe: this decoder judges its arity good and refuses its empty service
     * (a node that takes tenants), a node from before answers the arity error. */
    {
        struct rl_buf pb;
        struct rl_wire_reply r;

        rl_buf_init(&pb);
        ck_assert_int_eq(rl_wire_put_tenant_probe(&pb), 0);
        p = one_frame(&pb, &n);
        ck_assert_uint_eq((unsigned char)p[0], 0x98);
        expect_fault("probe", p, n, RL_WIRE_ERR_BAD_FIELD, false, 0,
                     "service must be a string of 1..128 bytes");
        rl_buf_deinit(&pb);
        memset(&r, 0, sizeof(r));
        r.op = RL_WIRE_OP_ERROR;
        r.message = mkstr("CHECK takes 6..7 elements", 25);
        ck_assert(!rl_wire_tenant_taken(&r));
        r.message = mkstr("service must be a string of 1..128 bytes", 40);
        ck_assert(rl_wire_tenant_taken(&r));
    }
    /* A name and an address give distinct, non-zero tenants, the same every time. */
    {
        uint8_t a1[16] = {0}, a2[16] = {0};

        a2[15] = 1;
        ck_assert_uint_ne(rl_wire_tenant("alice", NULL), 0);
        ck_assert_uint_eq(rl_wire_tenant("alice", a1), rl_wire_tenant("alice", a2));
        ck_assert_uint_ne(rl_wire_tenant("alice", NULL), rl_wire_tenant("bob", NULL));
        ck_assert_uint_ne(rl_wire_tenant(NULL, a1), rl_wire_tenant(NULL, a2));
        ck_assert_uint_eq(rl_wire_tenant(NULL, NULL), rl_wire_tenant(NULL, a1));
    }

    /* nil as the 7th element: no inline limit. */
    expect_req("nil limit", RAW(0x97, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, 0xc0), &req);
    ck_assert(!req.limit.set);
    ck_assert_uint_eq(req.cost, 1);

#define INL(...) RAW(0x97, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, __VA_ARGS__)
    expect_fault("not an array", INL(0x05), RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "limit must be nil or [algorithm, limit, window_ms, burst|nil]");
    expect_fault("3 parts", INL(0x93, 0xa4, 'g', 'c', 'r', 'a', 0x01, 0x01),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "limit must be nil or [algorithm");
    expect_fault("algo int", INL(0x94, 0x01, 0x01, 0x01, 0xc0), RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "limit's algorithm must be a string");
    expect_fault("algo unknown", INL(0x94, 0xa4, 'G', 'C', 'R', 'A', 0x01, 0x01, 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "limit's algorithm is unknown (use fixed_window");
    expect_fault("algo prefix", INL(0x94, 0xa3, 'g', 'c', 'r', 0x01, 0x01, 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "limit's algorithm is unknown");
    expect_fault("limit 0", INL(0x94, 0xa4, 'g', 'c', 'r', 'a', 0x00, 0x01, 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "limit's limit must be an unsigned integer of 1..4294967295");
    expect_fault("limit 2^32", INL(0x94, 0xa4, 'g', 'c', 'r', 'a', 0xcf, 0, 0, 0, 1, 0, 0, 0, 0,
                                   0x01, 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "limit's limit must be");
    expect_fault("limit neg", INL(0x94, 0xa4, 'g', 'c', 'r', 'a', 0xff, 0x01, 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "limit's limit must be");
    expect_fault("window 0", INL(0x94, 0xa4, 'g', 'c', 'r', 'a', 0x01, 0x00, 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "limit's window_ms must be an unsigned integer of 1..4294967295");
    /* past 32 bits: 366 days at most for the window algorithms, 2^32 - 1 for the others */
    expect_fault("window 366 days + 1", INL(0x94, 0xac, 'f', 'i', 'x', 'e', 'd', '_', 'w', 'i', 'n',
                                            'd', 'o', 'w', 0x01, 0xcf, 0, 0, 0, 0x07, 0x5c, 0xd7,
                                            0x88, 0x01, 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "limit's window_ms must be an unsigned integer of 1..31622400000");
    expect_fault("gcra window 2^32", INL(0x94, 0xa4, 'g', 'c', 'r', 'a', 0x01, 0xcf, 0, 0, 0, 1, 0,
                                         0, 0, 0, 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "limit's window_ms must be an unsigned integer of 1..4294967295 for this "
                 "algorithm");
    expect_fault("window float", INL(0x94, 0xa4, 'g', 'c', 'r', 'a', 0x01, 0xca, 0x3f, 0x80, 0, 0,
                                     0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "limit's window_ms must be");
    expect_fault("burst on fixed_window",
                 INL(0x94, 0xac, 'f', 'i', 'x', 'e', 'd', '_', 'w', 'i', 'n', 'd', 'o', 'w', 0x01,
                     0x01, 0x05),
                 RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "limit's burst must be nil: only token_bucket, gcra and leaky_bucket take a burst");
    expect_fault("burst 0", INL(0x94, 0xa4, 'g', 'c', 'r', 'a', 0x01, 0x01, 0x00),
                 RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "limit's burst must be nil or an unsigned integer of 1..4294967295");
    expect_fault("burst str", INL(0x94, 0xa4, 'g', 'c', 'r', 'a', 0x01, 0x01, 0xa1, '5'),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "limit's burst must be nil or");
    /* The earlier fields are judged first. */
    expect_fault("cost first", RAW(0x97, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0xff, 0x05),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "cost must be");
#undef INL
}
END_TEST

START_TEST(test_check_types)
{
    static const char *names[] = {"service", "user", "endpoint", "cost"};
    int i;

    for (i = 0; i < 4; i++) {
        /* Types wrong for every field. */
        expect_bad_field(i, names[i], RAW(0xc3));
        expect_bad_field(i, names[i], RAW(0x91, 0xa1, 'x'));
        expect_bad_field(i, names[i], RAW(0x81, 0xa1, 'x', 0x01));
        expect_bad_field(i, names[i], RAW(0xca, 0x3f, 0x80, 0x00, 0x00));
        expect_bad_field(i, names[i], RAW(0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0));
        expect_bad_field(i, names[i], RAW(0xd4, 0x01, 0x00));
        expect_bad_field(i, names[i], RAW(0xc7, 0x00, 0x05));
        expect_bad_field(i, names[i], RAW(0xff));
        /* bin is not a string, even with string bytes in it. */
        expect_bad_field(i, names[i], RAW(0xc4, 0x01, 'x'));
    }
    /* nil: only endpoint takes it. */
    expect_bad_field(0, "service", RAW(0xc0));
    expect_bad_field(1, "user", RAW(0xc0));
    expect_bad_field(3, "cost", RAW(0xc0));
    /* Integers where strings go, strings where an integer goes. */
    expect_bad_field(0, "service", RAW(0x05));
    expect_bad_field(1, "user", RAW(0xcd, 0x01, 0x00));
    expect_bad_field(2, "endpoint", RAW(0x00));
    expect_bad_field(3, "cost", RAW(0xa1, '1'));
    expect_bad_field(3, "cost", RAW(0xa0));
    /* Negative costs, in every signed width. */
    expect_bad_field(3, "cost", RAW(0xd0, 0x80));
    expect_bad_field(3, "cost", RAW(0xd1, 0xff, 0x38));
    expect_bad_field(3, "cost", RAW(0xd2, 0x80, 0x00, 0x00, 0x00));
    expect_bad_field(3, "cost", RAW(0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff));
}
END_TEST

START_TEST(test_check_bounds)
{
    char s[300];
    char p[512];
    struct rl_wire_req req;
    size_t n;

    memset(s + 2, 'a', sizeof(s) - 2);
    /* service: 0 and 129 bytes are out, 1 and 128 in. */
    n = check_with(p, 0, RAW(0xa0));
    expect_fault("service 0", p, n, RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "service must be a string of 1..128 bytes");
    s[0] = (char)0xd9;
    s[1] = (char)129;
    n = check_with(p, 0, s, 2 + 129);
    expect_fault("service 129", p, n, RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "service must be a string of 1..128 bytes");
    s[1] = (char)128;
    n = check_with(p, 0, s, 2 + 128);
    expect_req("service 128", p, n, &req);
    ck_assert_uint_eq(req.service.len, 128);
    n = check_with(p, 0, RAW(0xa1, 'z'));
    expect_req("service 1", p, n, &req);
    ck_assert(str_is(req.service, "z"));
    /* A short string in a long format is still short. */
    n = check_with(p, 0, RAW(0xdb, 0, 0, 0, 0x01, 'z'));
    expect_req("service str32", p, n, &req);
    ck_assert(str_is(req.service, "z"));

    /* user: 0 and 257 out, 256 in. */
    n = check_with(p, 1, RAW(0xd9, 0x00));
    expect_fault("user 0", p, n, RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "user must be a string of 1..256 bytes");
    memset(s, 'a', sizeof(s));
    s[0] = (char)0xda;
    s[1] = 0x01;
    s[2] = 0x01;
    n = check_with(p, 1, s, 3 + 257);
    expect_fault("user 257", p, n, RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "user must be a string of 1..256 bytes");
    s[2] = 0x00;
    n = check_with(p, 1, s, 3 + 256);
    expect_req("user 256", p, n, &req);
    ck_assert_uint_eq(req.user.len, 256);

    /* endpoint: "" and 128 in, 129 out. */
    n = check_with(p, 2, RAW(0xa0));
    expect_req("endpoint empty", p, n, &req);
    ck_assert_ptr_nonnull(req.endpoint.ptr);
    ck_assert_uint_eq(req.endpoint.len, 0);
    s[0] = (char)0xd9;
    s[1] = (char)129;
    n = check_with(p, 2, s, 2 + 129);
    expect_fault("endpoint 129", p, n, RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "endpoint must be nil or a string of 0..128 bytes");
    s[1] = (char)128;
    n = check_with(p, 2, s, 2 + 128);
    expect_req("endpoint 128", p, n, &req);
    ck_assert_uint_eq(req.endpoint.len, 128);

    /* cost: 1000000 in, 1000001 and above out. */
    n = check_with(p, 3, RAW(0xce, 0x00, 0x0f, 0x42, 0x40));
    expect_req("cost 1000000", p, n, &req);
    ck_assert_uint_eq(req.cost, 1000000);
    n = check_with(p, 3, RAW(0xce, 0x00, 0x0f, 0x42, 0x41));
    expect_fault("cost 1000001", p, n, RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "cost must be an unsigned integer of 0..1000000");
    n = check_with(p, 3, RAW(0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff));
    expect_fault("cost 2^64-1", p, n, RL_WIRE_ERR_BAD_FIELD, false, 7, "cost");
    n = check_with(p, 3, RAW(0xff));
    expect_fault("cost -1", p, n, RL_WIRE_ERR_BAD_FIELD, false, 7, "cost");
    /* A non-negative cost in a signed format is fine. */
    n = check_with(p, 3, RAW(0xd2, 0x00, 0x00, 0x00, 0x05));
    expect_req("cost int32", p, n, &req);
    ck_assert_uint_eq(req.cost, 5);
    n = check_with(p, 3, RAW(0x00));
    expect_req("cost 0", p, n, &req);
    ck_assert_uint_eq(req.cost, 0);

    /* The first bad field is the one reported. */
    expect_fault("service and user bad", RAW(0x96, 0x01, 0x07, 0xc0, 0xc0, 0xc0, 0x01),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "service");
}
END_TEST

START_TEST(test_clock_field)
{
    struct rl_wire_req req;

    expect_fault("now_ms -1", RAW(0x93, 0x04, 0x07, 0xff), RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "now_ms");
    expect_fault("now_ms str", RAW(0x93, 0x04, 0x07, 0xa1, '1'), RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "now_ms");
    expect_fault("now_ms nil", RAW(0x93, 0x04, 0x07, 0xc0), RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "now_ms");
    expect_req("now_ms int64", RAW(0x93, 0x04, 0x07, 0xd3, 0x3f, 0, 0, 0, 0, 0, 0, 0), &req);
    ck_assert_uint_eq(req.now_ms, 0x3f00000000000000ull);
    expect_req("now_ms 2^62", RAW(0x93, 0x04, 0x07, 0xcf, 0x40, 0, 0, 0, 0, 0, 0, 0), &req);
    ck_assert_uint_eq(req.now_ms, RL_WIRE_CLOCK_MAX);
    /* past 2^62 a window's end would pass 2^64 (a fixed_window admitted without limit) */
    expect_fault("now_ms 2^62 + 1", RAW(0x93, 0x04, 0x07, 0xcf, 0x40, 0, 0, 0, 0, 0, 0, 0x01),
                 RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "now_ms must be an unsigned integer of 0..4611686018427387904");
    expect_fault("now_ms int64 2^63 - 1",
                 RAW(0x93, 0x04, 0x07, 0xd3, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "now_ms");
    expect_fault("now_ms 2^64 - 1",
                 RAW(0x93, 0x04, 0x07, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
                 RL_WIRE_ERR_BAD_FIELD, false, 7, "now_ms");
}
END_TEST

/* AUTH: a token of 1..256 bytes, str or bin; its encoder and reply round-trip. */
START_TEST(test_auth_field)
{
    struct rl_wire_req req;
    struct rl_wire_decoder d;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_buf out;
    char big[300];
    const char *f;
    size_t n;

    expect_req("auth str", RAW(0x93, 0x06, 0x07, 0xa3, 'a', 'b', 'c'), &req);
    ck_assert_uint_eq(req.op, RL_WIRE_OP_AUTH);
    ck_assert(str_is(req.token, "abc"));
    expect_req("auth bin", RAW(0x93, 0x06, 0x07, 0xc4, 0x02, 0x00, 0xff), &req);
    ck_assert_uint_eq(req.token.len, 2);
    expect_fault("auth empty", RAW(0x93, 0x06, 0x07, 0xa0), RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "token must be a string or binary of 1..256 bytes");
    expect_fault("auth int", RAW(0x93, 0x06, 0x07, 0x01), RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "token");
    expect_fault("auth arity", RAW(0x92, 0x06, 0x07), RL_WIRE_ERR_BAD_FIELD, false, 7,
                 "AUTH takes 3 elements");
    rl_buf_init(&out);
    memset(big, 'x', sizeof(big));
    ck_assert_int_eq(rl_wire_put_auth(&out, 1, big, 257), -EMSGSIZE);
    ck_assert_int_eq(rl_wire_put_auth(&out, 9, big, 256), 0);
    f = one_frame(&out, &n);
    expect_req("auth 256", f, n, &req);
    ck_assert_uint_eq(req.id, 9);
    ck_assert_uint_eq(req.token.len, 256);
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_auth_reply(&out, 9, "web"), 0);
    f = one_frame(&out, &n);
    RL_CHECK_INT_EQ(rl_wire_decoder_init(&d), 0);
    ck_assert_int_eq(rl_wire_decode_reply(&d, f, n, rep), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_AUTH);
    ck_assert(str_is(rep->name, "web"));
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_error(&out, 9, RL_WIRE_ERR_NOT_OWNER, "shard 1"), 0);
    f = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, f, n, rep), 0);
    ck_assert_uint_eq(rep->err, RL_WIRE_ERR_NOT_OWNER);
    ck_assert_ptr_null(rep->owner.ptr);
    /* ERROR MOVING: its 5th element names the member to ask, "" to ask again */
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_moving(&out, 10, "shard 5 is moving", "n2"), 0);
    f = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, f, n, rep), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep->id, 10);
    ck_assert_uint_eq(rep->err, RL_WIRE_ERR_MOVING);
    ck_assert(str_is(rep->message, "shard 5 is moving"));
    ck_assert(str_is(rep->owner, "n2"));
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_moving(&out, 11, "m", ""), 0);
    f = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, f, n, rep), 0);
    ck_assert_uint_eq(rep->err, RL_WIRE_ERR_MOVING);
    ck_assert_ptr_nonnull(rep->owner.ptr);
    ck_assert_uint_eq(rep->owner.len, 0);
    /* MOVING without its owner is read as "" (ptr NULL); an owner on another code is not v1 */
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_error(&out, 12, RL_WIRE_ERR_MOVING, "m"), 0);
    f = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, f, n, rep), 0);
    ck_assert_uint_eq(rep->err, RL_WIRE_ERR_MOVING);
    ck_assert_ptr_null(rep->owner.ptr);
    {
        /* [255, 1, 6, "m", "n2"] */
        static const char bad[] = {(char)0x95, (char)0xcc, (char)0xff, 0x01, 0x06, (char)0xa1,
                                   'm', (char)0xa2, 'n', '2'};
        /* [255, 1, 7, "m", 3] */
        static const char bad2[] = {(char)0x95, (char)0xcc, (char)0xff, 0x01, 0x07, (char)0xa1,
                                    'm', 0x03};

        ck_assert_int_eq(rl_wire_decode_reply(&d, bad, sizeof(bad), rep), -EPROTO);
        ck_assert_int_eq(rl_wire_decode_reply(&d, bad2, sizeof(bad2), rep), -EPROTO);
    }
    rl_wire_decoder_deinit(&d);
    rl_buf_deinit(&out);
    free(rep);
}
END_TEST

static int
reply_rc(const char *p, size_t n)
{
    struct rl_wire_decoder d;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    int rc;

    RL_CHECK_INT_EQ(rl_wire_decoder_init(&d), 0);
    rc = rl_wire_decode_reply(&d, p, n, rep);
    rl_wire_decoder_deinit(&d);
    free(rep);
    return rc;
}

START_TEST(test_reply_strict)
{
    static const char *keys[RL_WIRE_STATS_MAX + 1];
    static int64_t vals[RL_WIRE_STATS_MAX + 1];
    struct rl_buf out;
    size_t i, n;

    ck_assert_int_eq(reply_rc(RAW(0x97, 0x01, 0x07, 0x00, 0x64, 0x63, 0x00, 0x00)), 0);
    ck_assert_int_eq(reply_rc(RAW(0x97, 0x01, 0x07, 0x06, 0x64, 0x63, 0x00, 0x00)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x97, 0x01, 0x07, 0x00, 0xff, 0x63, 0x00, 0x00)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x96, 0x01, 0x07, 0x00, 0x64, 0x63, 0x00)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x98, 0x01, 0x07, 0x00, 0x64, 0x63, 0x00, 0x00, 0x00)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x93, 0x02, 0x07, 0xa1, 'n')), 0);
    ck_assert_int_eq(reply_rc(RAW(0x93, 0x02, 0x07, 0xc4, 0x01, 'n')), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x92, 0x02, 0x07)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x93, 0x03, 0x07, 0x81, 0xa1, 'k', 0x01)), 0);
    ck_assert_int_eq(reply_rc(RAW(0x93, 0x03, 0x07, 0x81, 0x01, 0x01)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x93, 0x03, 0x07, 0x81, 0xa1, 'k', 0xc0)), -EPROTO);
    ck_assert_int_eq(
        reply_rc(RAW(0x93, 0x03, 0x07, 0x81, 0xa1, 'k', 0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x93, 0x03, 0x07, 0x91, 0x01)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x93, 0x04, 0x07, 0xff)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x94, 0xcc, 0xff, 0x00, 0x01, 0xa0)), 0);
    ck_assert_int_eq(reply_rc(RAW(0x94, 0xcc, 0xff, 0x00, 0x09, 0xa0)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x94, 0xcc, 0xff, 0x00, 0x00, 0xa0)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x94, 0xcc, 0xff, 0x00, 0x01, 0xc0)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x92, 0xcc, 0xc8, 0x07)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x92, 0xff, 0x07)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x91, 0x02)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0xc0)), -EPROTO);
    ck_assert_int_eq(reply_rc("", 0), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x93, 0x02, 0x07, 0xa1, 'n', 0x00)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0xdd, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02, 0x03, 0x04, 0x05)),
                     -EPROTO);

    /* One pair more than a client keeps is not a v1 reply, however it was sent. */
    for (i = 0; i <= RL_WIRE_STATS_MAX; i++) {
        keys[i] = "k";
        vals[i] = (int64_t)i;
    }
    rl_buf_init(&out);
    ck_assert_int_eq(rl_wire_put_stats_reply(&out, 1, keys, vals, RL_WIRE_STATS_MAX), 0);
    ck_assert_int_eq(rl_wire_frame(out.data, out.len, &n), 1);
    ck_assert_int_eq(reply_rc(out.data + RL_WIRE_HDR_LEN, n), 0);
    /* Patch map16 256 into 257 and add the pair: 0xa1 'k' 0x01. */
    ck_assert_uint_eq((unsigned char)out.data[RL_WIRE_HDR_LEN + 3], 0xde);
    out.data[RL_WIRE_HDR_LEN + 5] = 0x01;
    ck_assert_int_eq(rl_buf_append(&out, "\xa1k\x01", 3), 0);
    ck_assert_int_eq(reply_rc(out.data + RL_WIRE_HDR_LEN, n + 3), -EPROTO);
    rl_buf_deinit(&out);
}
END_TEST

/* xorshift64*: the fuzz loop must be the same on every run. */
static uint64_t
rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Packs a random value of at most max_depth nested containers, within *budget values. */
static void
gen_value(msgpack_packer *pk, uint64_t *s, int max_depth, int *budget)
{
    static const char bytes[300] = {0};
    static const size_t ext_lens[] = {0, 1, 2, 3, 4, 8, 16, 17, 255, 256};
    uint64_t r = rnd(s);
    int kind = (int)(r % (max_depth > 0 && *budget > 0 ? 12 : 10));
    size_t n, i;

    (*budget)--;
    r = rnd(s);
    switch (kind) {
    case 0:
        msgpack_pack_nil(pk);
        break;
    case 1:
        (r & 1) ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
        break;
    case 2:
        msgpack_pack_uint64(pk, r >> (rnd(s) % 64));
        break;
    case 3:
        msgpack_pack_int64(pk, -(int64_t)(r >> (1 + rnd(s) % 63)) - 1);
        break;
    case 4:
        msgpack_pack_float(pk, (float)(r % 1000) / 7.0f);
        break;
    case 5:
        msgpack_pack_double(pk, (double)(r % 100000) / 3.0);
        break;
    case 6:
    case 7:
        n = (r & 7) == 0 ? 300 : r % 40;
        msgpack_pack_str_with_body(pk, bytes, n);
        break;
    case 8:
        n = (r & 7) == 0 ? 300 : r % 40;
        msgpack_pack_bin_with_body(pk, bytes, n);
        break;
    case 9:
        n = ext_lens[r % (sizeof(ext_lens) / sizeof(ext_lens[0]))];
        msgpack_pack_ext_with_body(pk, bytes, n, (int8_t)(r >> 8));
        break;
    case 10:
        n = (r & 15) == 0 ? 20 : r % 5;
        msgpack_pack_array(pk, n);
        for (i = 0; i < n; i++) {
            gen_value(pk, s, max_depth - 1, budget);
        }
        break;
    default:
        n = r % 4;
        msgpack_pack_map(pk, n);
        for (i = 0; i < 2 * n; i++) {
            gen_value(pk, s, max_depth - 1, budget);
        }
        break;
    }
}

/* Decodes p as a request and a reply and checks the outcome is one docs/PROTOCOL.md allows. */
static void
fuzz_one(struct rl_wire_decoder *d, struct rl_wire_reply *rep, const char *p, size_t n)
{
    struct rl_wire_req req;
    struct rl_wire_fault f;
    int rc, rrc;

    memset(&f, 0xa5, sizeof(f));
    rc = rl_wire_decode_req(d, p, n, &req, &f);
    RL_CHECK(rc == 0 || rc == -1);
    if (rc == 0) {
        RL_CHECK(req.op >= RL_WIRE_OP_CHECK && req.op <= RL_WIRE_OP_AUTH);
        if (req.op == RL_WIRE_OP_AUTH) {
            RL_CHECK(req.token.len >= 1 && req.token.len <= RL_WIRE_TOKEN_MAX);
            RL_CHECK(req.token.ptr >= p && req.token.ptr + req.token.len <= p + n);
        }
        if (req.op == RL_WIRE_OP_CHECK) {
            RL_CHECK(req.service.len >= 1 && req.service.len <= RL_WIRE_SERVICE_MAX);
            RL_CHECK(req.user.len >= 1 && req.user.len <= RL_WIRE_USER_MAX);
            RL_CHECK(req.endpoint.len <= RL_WIRE_ENDPOINT_MAX);
            RL_CHECK(req.cost <= RL_WIRE_COST_MAX);
            RL_CHECK(req.service.ptr >= p && req.service.ptr + req.service.len <= p + n);
            RL_CHECK(req.user.ptr >= p && req.user.ptr + req.user.len <= p + n);
        }
    } else {
        RL_CHECK(f.err == RL_WIRE_ERR_MALFORMED || f.err == RL_WIRE_ERR_UNKNOWN_OP ||
                 f.err == RL_WIRE_ERR_BAD_FIELD);
        RL_CHECK(!f.fatal || f.err == RL_WIRE_ERR_MALFORMED);
        RL_CHECK(f.err != RL_WIRE_ERR_MALFORMED || f.id == 0);
        RL_CHECK(memchr(f.msg, '\0', sizeof(f.msg)) != NULL && f.msg[0] != '\0');
    }
    rrc = rl_wire_decode_reply(d, p, n, rep);
    RL_CHECK(rrc == 0 || rrc == -EPROTO);
    if (rrc == 0 && rep->op == RL_WIRE_OP_STATS) {
        RL_CHECK_UINT_LE(rep->nstats, RL_WIRE_STATS_MAX);
    }
}

START_TEST(test_fuzz)
{
    static const unsigned char hot[] = {0x00, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf,
                                        0xc0, 0xc1, 0xc4, 0xc7, 0xc9, 0xcf, 0xd3, 0xd8,
                                        0xd9, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xff};
    struct rl_wire_decoder d;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_wire_req in = {0};
    struct rl_wire_check_reply crep = {9, RL_WIRE_LIMITED, 10, 0, 500, 250};
    struct rl_wire_req req;
    struct rl_wire_fault f;
    struct rl_buf seeds[8];
    msgpack_sbuffer sb;
    msgpack_packer pk;
    static const char *keys[] = {"checks", "keys"};
    static const int64_t vals[] = {5, 6};
    char buf[1024];
    uint64_t s = 0x9e3779b97f4a7c15ull;
    size_t n, k, j;
    int iter, valid = 0;

    ck_assert_int_eq(rl_wire_decoder_init(&d), 0);
    for (k = 0; k < 8; k++) {
        rl_buf_init(&seeds[k]);
    }
    in.id = 1234567;
    in.service = mkstr("checkout", 8);
    in.user = mkstr("user-1", 6);
    in.endpoint = mkstr("/pay", 4);
    in.cost = 70000;
    ck_assert_int_eq(rl_wire_put_check(&seeds[0], &in), 0);
    in.endpoint.ptr = NULL;
    ck_assert_int_eq(rl_wire_put_check(&seeds[1], &in), 0);
    ck_assert_int_eq(rl_wire_put_ping(&seeds[2], 3), 0);
    ck_assert_int_eq(rl_wire_put_clock(&seeds[3], 4, 1700000000000ull), 0);
    ck_assert_int_eq(rl_wire_put_check_reply(&seeds[4], &crep), 0);
    ck_assert_int_eq(rl_wire_put_stats_reply(&seeds[5], 6, keys, vals, 2), 0);
    ck_assert_int_eq(rl_wire_put_error(&seeds[6], 7, RL_WIRE_ERR_BAD_FIELD, "cost"), 0);
    ck_assert_int_eq(rl_wire_put_ping_reply(&seeds[7], 8, "router-1"), 0);

    for (iter = 0; iter < 100000; iter++) {
        uint64_t r = rnd(&s);

        if (iter % 5 < 2) {
            /* Random bytes, weighted towards header bytes. */
            n = 1 + rnd(&s) % 48;
            for (k = 0; k < n; k++) {
                r = rnd(&s);
                buf[k] = (r & 1) ? (char)hot[(r >> 1) % sizeof(hot)] : (char)(r >> 8);
            }
            fuzz_one(&d, rep, buf, n);
        } else if (iter % 5 < 4) {
            /* A valid message with a few bytes overwritten, inserted, removed or cut. */
            const struct rl_buf *seed = &seeds[r % 8];
            int muts = 1 + (int)(rnd(&s) % 4);

            n = seed->len - RL_WIRE_HDR_LEN;
            memcpy(buf, seed->data + RL_WIRE_HDR_LEN, n);
            while (muts-- > 0 && n > 0) {
                r = rnd(&s);
                k = (r >> 8) % n;
                switch (r % 4) {
                case 0:
                    buf[k] = (char)(rnd(&s) >> 13);
                    break;
                case 1:
                    buf[k] = (char)hot[(r >> 20) % sizeof(hot)];
                    break;
                case 2:
                    memmove(buf + k + 1, buf + k, n - k);
                    buf[k] = (char)hot[(r >> 20) % sizeof(hot)];
                    n++;
                    break;
                default:
                    n = (r & 0x100) ? k : n - 1;
                    break;
                }
            }
            fuzz_one(&d, rep, buf, n);
        } else {
            /*
             * A random well-formed value of at most 32 levels: never fatal. Every proper
             * prefix of it, and it with a byte more, are not one value: always fatal.
             */
            int budget = 40;

            msgpack_sbuffer_init(&sb);
            msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
            gen_value(&pk, &s, (r & 3) == 0 ? 32 : 4, &budget);
            RL_CHECK_INT_EQ(rl_wire_decode_req(&d, sb.data, sb.size, &req, &f) == -1 && f.fatal, 0);
            fuzz_one(&d, rep, sb.data, sb.size);
            j = rnd(&s) % sb.size;
            RL_CHECK_INT_EQ(rl_wire_decode_req(&d, sb.data, j, &req, &f), -1);
            RL_CHECK(f.fatal && f.err == RL_WIRE_ERR_MALFORMED, "prefix %zu of %zu: %s", j, sb.size,
                     f.msg);
            msgpack_pack_nil(&pk);
            RL_CHECK_INT_EQ(rl_wire_decode_req(&d, sb.data, sb.size, &req, &f), -1);
            RL_CHECK(f.fatal && f.err == RL_WIRE_ERR_MALFORMED);
            msgpack_sbuffer_destroy(&sb);
            valid++;
        }
    }
    ck_assert_int_eq(valid, 20000);
    for (k = 0; k < 8; k++) {
        rl_buf_deinit(&seeds[k]);
    }
    rl_wire_decoder_deinit(&d);
    free(rep);
}
END_TEST

/* ---- THROTTLED ---------------------------------------------------------------------------- */

START_TEST(test_throttled_roundtrip_request)
{
    struct rl_wire_req in, req;
    struct rl_buf out;
    const char *p;
    size_t n;

    rl_buf_init(&out);
    memset(&in, 0, sizeof(in));
    in.op = RL_WIRE_OP_THROTTLED;
    in.id = 77;
    /* Everything absent: nil, nil, nil, and the default top. */
    ck_assert_int_eq(rl_wire_put_throttled(&out, &in), 0);
    p = one_frame(&out, &n);
    ck_assert_uint_eq(n, 6); /* 95 07 4d c0 c0 c0 */
    expect_req("throttled bare", p, n, &req);
    ck_assert_uint_eq(req.op, RL_WIRE_OP_THROTTLED);
    ck_assert_uint_eq(req.id, 77);
    ck_assert_ptr_null(req.service.ptr);
    ck_assert(!req.has_since);
    ck_assert_uint_eq(req.top, RL_WIRE_TOP_DEFAULT);
    /* Everything given. */
    in.service = mkstr("checkout", 8);
    in.has_since = true;
    in.since_ms = 600000;
    in.top = RL_WIRE_TOP_MAX;
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_throttled(&out, &in), 0);
    p = one_frame(&out, &n);
    expect_req("throttled full", p, n, &req);
    ck_assert(str_is(req.service, "checkout"));
    ck_assert(req.has_since);
    ck_assert_uint_eq(req.since_ms, 600000);
    ck_assert_uint_eq(req.top, RL_WIRE_TOP_MAX);
    /* Trailing fields may be left out. */
    expect_req("throttled 2", RAW(0x92, 0x07, 0x01), &req);
    ck_assert_uint_eq(req.top, RL_WIRE_TOP_DEFAULT);
    expect_req("throttled 3", RAW(0x93, 0x07, 0x01, 0xa1, 's'), &req);
    ck_assert(str_is(req.service, "s"));
    ck_assert(!req.has_since);
    expect_req("throttled 4", RAW(0x94, 0x07, 0x01, 0xc0, 0x00), &req);
    ck_assert(req.has_since);
    ck_assert_uint_eq(req.since_ms, 0);
    expect_req("throttled top 1", RAW(0x95, 0x07, 0x01, 0xc0, 0xc0, 0x01), &req);
    ck_assert_uint_eq(req.top, 1);
    rl_buf_deinit(&out);
}
END_TEST

START_TEST(test_throttled_bad_requests)
{
    char big[RL_WIRE_SERVICE_MAX + 3];

    expect_fault("throttled 6", RAW(0x96, 0x07, 0x05, 0xc0, 0xc0, 0xc0, 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "THROTTLED takes 2..5 elements");
    expect_fault("service int", RAW(0x93, 0x07, 0x05, 0x01), RL_WIRE_ERR_BAD_FIELD, false, 5,
                 "service must be nil or a string of 1..128 bytes");
    expect_fault("service empty", RAW(0x93, 0x07, 0x05, 0xa0), RL_WIRE_ERR_BAD_FIELD, false, 5,
                 "service must be nil");
    expect_fault("service bin", RAW(0x93, 0x07, 0x05, 0xc4, 0x01, 's'), RL_WIRE_ERR_BAD_FIELD,
                 false, 5, "service must be nil");
    big[0] = (char)0xd9;
    big[1] = (char)(RL_WIRE_SERVICE_MAX + 1);
    memset(big + 2, 'x', RL_WIRE_SERVICE_MAX + 1);
    {
        char p[sizeof(big) + 3] = {(char)0x93, 0x07, 0x05};

        memcpy(p + 3, big, sizeof(big));
        expect_fault("service 129", p, sizeof(p), RL_WIRE_ERR_BAD_FIELD, false, 5,
                     "service must be nil");
    }
    expect_fault("since negative", RAW(0x94, 0x07, 0x05, 0xc0, 0xff), RL_WIRE_ERR_BAD_FIELD,
                 false, 5, "since_ms must be nil or an unsigned integer");
    expect_fault("since str", RAW(0x94, 0x07, 0x05, 0xc0, 0xa1, '1'), RL_WIRE_ERR_BAD_FIELD,
                 false, 5, "since_ms");
    expect_fault("since float", RAW(0x94, 0x07, 0x05, 0xc0, 0xca, 0x3f, 0x80, 0, 0),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "since_ms");
    expect_fault("top 0", RAW(0x95, 0x07, 0x05, 0xc0, 0xc0, 0x00), RL_WIRE_ERR_BAD_FIELD, false,
                 5, "top must be nil or an unsigned integer of 1..100");
    expect_fault("top 101", RAW(0x95, 0x07, 0x05, 0xc0, 0xc0, 0x65), RL_WIRE_ERR_BAD_FIELD, false,
                 5, "top must be");
    expect_fault("top 2^32", RAW(0x95, 0x07, 0x05, 0xc0, 0xc0, 0xcf, 0, 0, 0, 1, 0, 0, 0, 0),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "top must be");
    /* A hostile count in the request is still the scan's. */
    expect_fault("throttled claims", RAW(0xdd, 0xff, 0xff, 0xff, 0xff, 0x07, 0x05),
                 RL_WIRE_ERR_MALFORMED, true, 0, "count exceeds the frame");
}
END_TEST

/* ---- HOT ---------------------------------------------------------------------------------- */

START_TEST(test_hot_roundtrip)
{
    struct rl_wire_req in, req;
    struct rl_wire_hot_key keys[2];
    struct rl_wire_decoder d;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_buf out;
    const char *p;
    size_t n;

    ck_assert_int_eq(rl_wire_decoder_init(&d), 0);
    rl_buf_init(&out);
    memset(&in, 0, sizeof(in));
    in.op = RL_WIRE_OP_HOT;
    in.id = 5;
    ck_assert_int_eq(rl_wire_put_req(&out, &in), 0);
    p = one_frame(&out, &n);
    ck_assert_uint_eq(n, 5); /* 94 08 05 c0 c0 */
    expect_req("hot bare", p, n, &req);
    ck_assert_uint_eq(req.op, RL_WIRE_OP_HOT);
    ck_assert_ptr_null(req.service.ptr);
    ck_assert_uint_eq(req.top, 0);
    in.service = mkstr("web", 3);
    in.top = 7;
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_hot(&out, &in), 0);
    p = one_frame(&out, &n);
    expect_req("hot full", p, n, &req);
    ck_assert(str_is(req.service, "web"));
    ck_assert_uint_eq(req.top, 7);
    expect_req("hot 2", RAW(0x92, 0x08, 0x01), &req);
    expect_req("hot 3", RAW(0x93, 0x08, 0x01, 0xa1, 's'), &req);
    ck_assert(str_is(req.service, "s"));
    expect_fault("hot 5", RAW(0x95, 0x08, 0x05, 0xc0, 0xc0, 0xc0), RL_WIRE_ERR_BAD_FIELD, false,
                 5, "HOT takes 2..4 elements");
    expect_fault("hot service int", RAW(0x93, 0x08, 0x05, 0x01), RL_WIRE_ERR_BAD_FIELD, false, 5,
                 "service must be nil or a string of 1..128 bytes");
    expect_fault("hot top 0", RAW(0x94, 0x08, 0x05, 0xc0, 0x00), RL_WIRE_ERR_BAD_FIELD, false, 5,
                 "top must be nil or an unsigned integer of 1..100");
    expect_fault("hot top 101", RAW(0x94, 0x08, 0x05, 0xc0, 0x65), RL_WIRE_ERR_BAD_FIELD, false,
                 5, "top must be");

    keys[0].service = mkstr("web", 3);
    keys[0].user = mkstr("bob", 3);
    keys[0].count = 51234;
    keys[0].err = 0;
    keys[1].service = mkstr("api", 3);
    keys[1].user = mkstr("u\x00\xff", 3);
    keys[1].count = 880;
    keys[1].err = 12;
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_hot_reply(&out, 9, 10000, keys, 2), 0);
    p = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_HOT);
    ck_assert_uint_eq(rep->id, 9);
    ck_assert_uint_eq(rep->period_ms, 10000);
    ck_assert_uint_eq(rep->nhot, 2);
    ck_assert(str_is(rep->hot[0].user, "bob"));
    ck_assert_uint_eq(rep->hot[0].count, 51234);
    ck_assert_uint_eq(rep->hot[1].user.len, 3);
    ck_assert_int_eq(memcmp(rep->hot[1].user.ptr, "u\x00\xff", 3), 0);
    ck_assert_uint_eq(rep->hot[1].err, 12);
    /* Empty, and the shapes the decoder refuses. */
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_hot_reply(&out, 1, 10000, NULL, 0), 0);
    p = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->nhot, 0);
    keys[0].user = mkstr("", 0);
    ck_assert_int_eq(rl_wire_put_hot_reply(&out, 1, 10000, keys, 1), -EMSGSIZE);
    {
        /* [8, 1, 10000, [["web", "bob", 1]]]: a key of 3 elements */
        static const char bad[] = {(char)0x94, 0x08, 0x01, (char)0xcd, 0x27, 0x10, (char)0x91,
                                   (char)0x93, (char)0xa3, 'w', 'e', 'b', (char)0xa3, 'b', 'o',
                                   'b', 0x01};

        ck_assert_int_eq(rl_wire_decode_reply(&d, bad, sizeof(bad), rep), -EPROTO);
    }
    rl_buf_deinit(&out);
    rl_wire_decoder_deinit(&d);
    free(rep);
}
END_TEST

/* RELEASE [10, id, service, user, endpoint, count, limit, tenant]: a count of 1..1000000 in
 * any unsigned format, the limit and tenant as CHECK's (a concurrency limit takes N up to
 * 10000); its reply is a CHECK reply under op 10. */
START_TEST(test_release_roundtrip)
{
    static const uint32_t counts[] = {1, 2, 127, 128, 65535, 65536, 1000000};
    struct rl_wire_req in, req;
    struct rl_wire_decoder d;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_wire_check_reply cr = {8, RL_WIRE_ALLOWED, 5, 3, 30000, 0};
    struct rl_buf out;
    const char *p;
    size_t n;

    ck_assert_ptr_nonnull(rep);
    ck_assert_int_eq(rl_wire_decoder_init(&d), 0);
    rl_buf_init(&out);
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        memset(&in, 0, sizeof(in));
        in.op = RL_WIRE_OP_RELEASE;
        in.id = 6;
        in.service = mkstr("export", 6);
        in.user = mkstr("bob", 3);
        in.endpoint = mkstr("/x", 2);
        in.cost = counts[i];
        if (i % 2 == 1) {
            in.limit.set = true;
            in.limit.algo = 6; /* concurrency (ruleset.h) */
            in.limit.limit = 10000;
            in.limit.window_ms = 60000;
            in.limit.burst = 10000;
            in.tenant = (uint32_t)i;
        }
        rl_buf_reset(&out);
        ck_assert_int_eq(rl_wire_put_req(&out, &in), 0);
        p = one_frame(&out, &n);
        ck_assert_uint_eq((unsigned char)p[1], RL_WIRE_OP_RELEASE);
        expect_req("release", p, n, &req);
        ck_assert_uint_eq(req.op, RL_WIRE_OP_RELEASE);
        ck_assert_uint_eq(req.id, 6);
        ck_assert(str_is(req.service, "export") && str_is(req.user, "bob"));
        ck_assert(str_is(req.endpoint, "/x"));
        ck_assert_uint_eq(req.cost, counts[i]);
        ck_assert_int_eq(req.limit.set, in.limit.set);
        ck_assert_uint_eq(req.limit.algo, in.limit.algo);
        ck_assert_uint_eq(req.limit.limit, in.limit.limit);
        ck_assert_uint_eq(req.tenant, in.tenant);
    }
    expect_req("release uint64",
               RAW(0x96, 0x0a, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0xcf, 0, 0, 0, 0, 0, 0, 0, 3),
               &req);
    ck_assert_uint_eq(req.cost, 3);
    expect_fault("release 0", RAW(0x96, 0x0a, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0x00),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "count must be an unsigned integer of 1..1000000");
    expect_fault("release 1000001",
                 RAW(0x96, 0x0a, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0xce, 0, 0x0f, 0x42, 0x41),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "count must be");
    expect_fault("release -1", RAW(0x96, 0x0a, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0xff),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "count must be");
    expect_fault("release nil", RAW(0x96, 0x0a, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "count must be");
    expect_fault("release 5", RAW(0x95, 0x0a, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "RELEASE takes 6..8 elements");
    expect_fault("release 9",
                 RAW(0x99, 0x0a, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, 0xc0, 0xc0, 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "RELEASE takes 6..8 elements");
    expect_fault("release user", RAW(0x96, 0x0a, 0x05, 0xa1, 's', 0xa0, 0xc0, 0x01),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "user must be");
    expect_fault("release tenant",
                 RAW(0x98, 0x0a, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, 0xc0, 0xff),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "tenant must be");
    /* a concurrency limit's N: 1..10000 */
    expect_fault("release concurrency 10001",
                 RAW(0x97, 0x0a, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, 0x94, 0xab, 'c', 'o',
                     'n', 'c', 'u', 'r', 'r', 'e', 'n', 'c', 'y', 0xcd, 0x27, 0x11, 0x0a, 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 5,
                 "limit's limit must be an unsigned integer of 1..10000 for concurrency");
    expect_req("release concurrency 10000",
               RAW(0x97, 0x0a, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, 0x94, 0xab, 'c', 'o', 'n',
                   'c', 'u', 'r', 'r', 'e', 'n', 'c', 'y', 0xcd, 0x27, 0x10, 0x0a, 0xc0),
               &req);
    ck_assert_uint_eq(req.limit.limit, 10000);
    ck_assert_uint_eq(req.limit.window_ms, 10);
    /* the reply */
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_release_reply(&out, &cr), 0);
    p = one_frame(&out, &n);
    ck_assert_uint_eq((unsigned char)p[1], RL_WIRE_OP_RELEASE);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_RELEASE);
    ck_assert_uint_eq(rep->id, 8);
    ck_assert_uint_eq(rep->check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep->check.limit, 5);
    ck_assert_uint_eq(rep->check.remaining, 3);
    ck_assert_uint_eq(rep->check.reset_ms, 30000);
    ck_assert_uint_eq(rep->check.retry_after_ms, 0);
    rl_buf_deinit(&out);
    rl_wire_decoder_deinit(&d);
    free(rep);
}
END_TEST

/* HANDOFF_OUT and HANDOFF_IN, and their replies: each field back as encoded; records of the
 * largest size and one byte more; the fields' refusals, named. */
/* ADJUST [9, id, service, user, endpoint, delta, limit, tenant]: a signed delta of
 * -1000000..1000000 in any integer format, the limit and tenant as CHECK's; its reply is a
 * CHECK reply under op 9. */
START_TEST(test_adjust_roundtrip)
{
    static const int32_t deltas[] = {0, 1, -1, 127, -32, -33, 1000000, -1000000, 65536, -65537};
    struct rl_wire_req in, req;
    struct rl_wire_decoder d;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_wire_check_reply cr = {7, RL_WIRE_ALLOWED, 10, 0, 900, 1234};
    struct rl_buf out;
    const char *p;
    size_t n;

    ck_assert_ptr_nonnull(rep);
    ck_assert_int_eq(rl_wire_decoder_init(&d), 0);
    rl_buf_init(&out);
    for (size_t i = 0; i < sizeof(deltas) / sizeof(deltas[0]); i++) {
        memset(&in, 0, sizeof(in));
        in.op = RL_WIRE_OP_ADJUST;
        in.id = 5;
        in.service = mkstr("llm", 3);
        in.user = mkstr("bob", 3);
        in.delta = deltas[i];
        if (i % 2 == 1) {
            in.limit.set = true;
            in.limit.algo = 3; /* token_bucket (ruleset.h) */
            in.limit.limit = 100;
            in.limit.window_ms = 1000;
            in.limit.burst = 100;
            in.tenant = (uint32_t)i;
        }
        rl_buf_reset(&out);
        ck_assert_int_eq(rl_wire_put_req(&out, &in), 0);
        p = one_frame(&out, &n);
        expect_req("adjust", p, n, &req);
        ck_assert_uint_eq(req.op, RL_WIRE_OP_ADJUST);
        ck_assert_uint_eq(req.id, 5);
        ck_assert(str_is(req.service, "llm") && str_is(req.user, "bob"));
        ck_assert_ptr_null(req.endpoint.ptr);
        ck_assert_int_eq(req.delta, deltas[i]);
        ck_assert_int_eq(req.limit.set, in.limit.set);
        ck_assert_uint_eq(req.tenant, in.tenant);
        ck_assert_uint_eq(req.cost, 0);
    }
    /* the same values in other integer formats */
    expect_req("adjust int8", RAW(0x96, 0x09, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0xd0, 0x85), &req);
    ck_assert_int_eq(req.delta, -123);
    expect_req(
        "adjust int64 positive",
        RAW(0x96, 0x09, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0xd3, 0, 0, 0, 0, 0, 0x0f, 0x42, 0x40),
        &req);
    ck_assert_int_eq(req.delta, 1000000);
    expect_req("adjust -1000000",
               RAW(0x96, 0x09, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0xd2, 0xff, 0xf0, 0xbd, 0xc0),
               &req);
    ck_assert_int_eq(req.delta, -1000000);
    expect_fault("adjust 1000001",
                 RAW(0x96, 0x09, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0xce, 0, 0x0f, 0x42, 0x41),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "delta must be an integer of -1000000..1000000");
    expect_fault("adjust -1000001",
                 RAW(0x96, 0x09, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0xd2, 0xff, 0xf0, 0xbd, 0xbf),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "delta must be");
    expect_fault("adjust float",
                 RAW(0x96, 0x09, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0xca, 0x3f, 0x80, 0, 0),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "delta must be");
    expect_fault("adjust nil", RAW(0x96, 0x09, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "delta must be");
    expect_fault("adjust 5", RAW(0x95, 0x09, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "ADJUST takes 6..8 elements");
    expect_fault("adjust service", RAW(0x96, 0x09, 0x05, 0xa0, 0xa1, 'u', 0xc0, 0x01),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "service must be");
    expect_fault("adjust limit", RAW(0x97, 0x09, 0x05, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, 0x01),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "limit must be nil or");
    /* the reply */
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_adjust_reply(&out, &cr), 0);
    p = one_frame(&out, &n);
    ck_assert_uint_eq((unsigned char)p[1], RL_WIRE_OP_ADJUST);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_ADJUST);
    ck_assert_uint_eq(rep->id, 7);
    ck_assert_uint_eq(rep->check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep->check.limit, 10);
    ck_assert_uint_eq(rep->check.remaining, 0);
    ck_assert_uint_eq(rep->check.reset_ms, 900);
    ck_assert_uint_eq(rep->check.retry_after_ms, 1234);
    rl_buf_deinit(&out);
    rl_wire_decoder_deinit(&d);
    free(rep);
}
END_TEST

START_TEST(test_handoff_roundtrip)
{
    struct rl_wire_req in, req;
    struct rl_wire_decoder d;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    char *big = malloc(RL_WIRE_RECORDS_MAX + 1);
    struct rl_buf out;
    const char *p;
    size_t n;

    ck_assert_ptr_nonnull(rep);
    ck_assert_ptr_nonnull(big);
    for (size_t i = 0; i <= RL_WIRE_RECORDS_MAX; i++) {
        big[i] = (char)(i * 7);
    }
    ck_assert_int_eq(rl_wire_decoder_init(&d), 0);
    rl_buf_init(&out);
    memset(&in, 0, sizeof(in));
    in.op = RL_WIRE_OP_HANDOFF_OUT;
    in.id = 5;
    in.shard = 1048575;
    in.offset = UINT64_MAX;
    ck_assert_int_eq(rl_wire_put_req(&out, &in), 0);
    p = one_frame(&out, &n);
    expect_req("handoff_out", p, n, &req);
    ck_assert_uint_eq(req.op, RL_WIRE_OP_HANDOFF_OUT);
    ck_assert_uint_eq(req.shard, 1048575);
    ck_assert_uint_eq(req.offset, UINT64_MAX);
    in.op = RL_WIRE_OP_HANDOFF_IN;
    in.shard = 3;
    in.records = mkstr(big, RL_WIRE_RECORDS_MAX);
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_req(&out, &in), 0);
    p = one_frame(&out, &n);
    ck_assert_uint_le(n, RL_WIRE_FRAME_MAX);
    expect_req("handoff_in", p, n, &req);
    ck_assert_uint_eq(req.shard, 3);
    ck_assert_uint_eq(req.records.len, RL_WIRE_RECORDS_MAX);
    ck_assert_int_eq(memcmp(req.records.ptr, big, RL_WIRE_RECORDS_MAX), 0);
    in.records = mkstr(big, RL_WIRE_RECORDS_MAX + 1);
    ck_assert_int_eq(rl_wire_put_req(&out, &in), -EMSGSIZE);
    expect_fault("handoff_out 3", RAW(0x93, 0x0b, 0x05, 0x00), RL_WIRE_ERR_BAD_FIELD, false, 5,
                 "HANDOFF_OUT takes 4 elements");
    expect_fault("handoff_out shard", RAW(0x94, 0x0b, 0x05, 0xce, 0x00, 0x10, 0x00, 0x00, 0x00),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "shard must be an unsigned integer of 0..1048575");
    expect_fault("handoff_out offset", RAW(0x94, 0x0b, 0x05, 0x00, 0xff), RL_WIRE_ERR_BAD_FIELD,
                 false, 5, "offset must be an unsigned integer");
    expect_fault("handoff_in str", RAW(0x94, 0x0c, 0x05, 0x00, 0xa1, 'x'), RL_WIRE_ERR_BAD_FIELD,
                 false, 5, "records must be a binary of 0..65500 bytes");
    expect_req("handoff_in empty", RAW(0x94, 0x0c, 0x05, 0x00, 0xc4, 0x00), &req);
    ck_assert_ptr_nonnull(req.records.ptr);
    ck_assert_uint_eq(req.records.len, 0);
    ck_assert(!req.final);
    /* the optional 5th element: final */
    expect_req("handoff_in final", RAW(0x95, 0x0c, 0x05, 0x00, 0xc4, 0x00, 0xc3), &req);
    ck_assert(req.final);
    expect_req("handoff_in not final", RAW(0x95, 0x0c, 0x05, 0x00, 0xc4, 0x00, 0xc2), &req);
    ck_assert(!req.final);
    expect_fault("handoff_in final int", RAW(0x95, 0x0c, 0x05, 0x00, 0xc4, 0x00, 0x01),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "final must be a boolean");
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_handoff_in_final(&out, 6, 9, big, 10, true, NULL), 0);
    p = one_frame(&out, &n);
    expect_req("handoff_in_final", p, n, &req);
    ck_assert_uint_eq(req.shard, 9);
    ck_assert_uint_eq(req.records.len, 10);
    ck_assert(req.final);
    ck_assert_ptr_null(req.from.ptr);
    /* the 6th element: the sender's name */
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_handoff_in_final(&out, 7, 9, big, 0, false, "node-a"), 0);
    p = one_frame(&out, &n);
    expect_req("handoff_in from", p, n, &req);
    ck_assert(!req.final);
    ck_assert(req.has_final);
    ck_assert(str_is(req.from, "node-a"));
    expect_fault("handoff_in from int", RAW(0x96, 0x0c, 0x05, 0x00, 0xc4, 0x00, 0xc3, 0x01),
                 RL_WIRE_ERR_BAD_FIELD, false, 5, "from must be a string of 0..63 bytes");
    in.final = true;
    in.records = mkstr(big, 3);
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_req(&out, &in), 0);
    p = one_frame(&out, &n);
    expect_req("handoff_in req final", p, n, &req);
    ck_assert(req.final);
    in.final = false;

    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_handoff_out_reply(&out, 9, big, 100, 12345), 0);
    p = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_HANDOFF_OUT);
    ck_assert_uint_eq(rep->id, 9);
    ck_assert_uint_eq(rep->records.len, 100);
    ck_assert_int_eq(memcmp(rep->records.ptr, big, 100), 0);
    ck_assert_uint_eq(rep->next, 12345);
    ck_assert_int_eq(rl_wire_put_handoff_out_reply(&out, 9, big, RL_WIRE_RECORDS_MAX + 1, 0),
                     -EMSGSIZE);
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_handoff_in_reply(&out, 10, 812, 3), 0);
    p = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_HANDOFF_IN);
    ck_assert_uint_eq(rep->imported, 812);
    ck_assert_uint_eq(rep->skipped, 3);
    /* a later reply of another op leaves no handoff field behind */
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_ping_reply(&out, 1, "n"), 0);
    p = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_ptr_null(rep->records.ptr);
    ck_assert_uint_eq(rep->imported + rep->skipped + rep->next, 0);
    {
        /* [11, 1, "x", 0]: records must be bin */
        static const char bad[] = {(char)0x94, 0x0b, 0x01, (char)0xa1, 'x', 0x00};

        ck_assert_int_eq(rl_wire_decode_reply(&d, bad, sizeof(bad), rep), -EPROTO);
    }
    rl_buf_deinit(&out);
    rl_wire_decoder_deinit(&d);
    free(rep);
    free(big);
}
END_TEST

static void
fill_ep(struct rl_wire_episode *e, const char *svc, const char *ep, const char *user,
        const char *node, uint64_t refused, uint32_t ended)
{
    memset(e, 0, sizeof(*e));
    e->service = mkstr(svc, strlen(svc));
    if (ep != NULL) {
        e->endpoint = mkstr(ep, strlen(ep));
    }
    e->user = mkstr(user, strlen(user));
    e->node = mkstr(node, strlen(node));
    e->start_ms = 1700000000000ull + refused;
    e->end_ms = ended == RL_WIRE_ENDED_OPEN ? 0 : UINT64_MAX;
    e->refused = refused;
    e->ended = ended;
}

START_TEST(test_throttled_roundtrip_reply)
{
    struct rl_wire_episode eps[3];
    struct rl_wire_str missing[2] = {{"c", 1}, {"", 0}};
    struct rl_wire_decoder d;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_buf out;
    const char *p;
    size_t n, nput;

    ck_assert_int_eq(rl_wire_decoder_init(&d), 0);
    rl_buf_init(&out);
    fill_ep(&eps[0], "web", NULL, "bob", "a", 12, RL_WIRE_ENDED_OPEN);
    fill_ep(&eps[1], "web", "/login", "alice", "b", 5, RL_WIRE_ENDED_ALLOWED);
    fill_ep(&eps[2], "api", NULL, "carol", "a", 1, RL_WIRE_ENDED_IDLE);
    ck_assert_int_eq(rl_wire_put_throttled_reply(&out, 9, eps, 3, missing, 2, &nput), 0);
    ck_assert_uint_eq(nput, 3);
    p = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_THROTTLED);
    ck_assert_uint_eq(rep->id, 9);
    ck_assert_uint_eq(rep->nepisodes, 3);
    for (size_t i = 0; i < 3; i++) {
        const struct rl_wire_episode *e = &rep->episodes[i];

        ck_assert(str_is(e->service, eps[i].service.ptr));
        ck_assert(str_is(e->user, eps[i].user.ptr));
        ck_assert(str_is(e->node, eps[i].node.ptr));
        if (eps[i].endpoint.ptr == NULL) {
            ck_assert_ptr_null(e->endpoint.ptr);
        } else {
            ck_assert(str_is(e->endpoint, eps[i].endpoint.ptr));
        }
        ck_assert_uint_eq(e->start_ms, eps[i].start_ms);
        ck_assert_uint_eq(e->end_ms, eps[i].end_ms);
        ck_assert_uint_eq(e->refused, eps[i].refused);
        ck_assert_uint_eq(e->ended, eps[i].ended);
    }
    ck_assert_uint_eq(rep->nmissing, 2);
    ck_assert(str_is(rep->missing[0], "c"));
    ck_assert_uint_eq(rep->missing[1].len, 0);
    /* No episodes at all (a node with recording off). */
    rl_buf_reset(&out);
    ck_assert_int_eq(rl_wire_put_throttled_reply(&out, 1, NULL, 0, NULL, 0, NULL), 0);
    p = one_frame(&out, &n);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->nepisodes, 0);
    ck_assert_uint_eq(rep->nmissing, 0);
    /* Strings past the protocol's bounds are the caller's bug. */
    rl_buf_reset(&out);
    eps[0].service.len = RL_WIRE_SERVICE_MAX + 1;
    ck_assert_int_eq(rl_wire_put_throttled_reply(&out, 1, eps, 1, NULL, 0, NULL), -EMSGSIZE);
    ck_assert_uint_eq(out.len, 0);
    rl_wire_decoder_deinit(&d);
    rl_buf_deinit(&out);
    free(rep);
}
END_TEST

/* The largest episodes there can be, as many as asked: the reply stops before the frame
 * limit and says how many it holds; those decode. */
START_TEST(test_throttled_reply_fits_frame)
{
    static char svc[RL_WIRE_SERVICE_MAX], ep[RL_WIRE_ENDPOINT_MAX], user[RL_WIRE_USER_MAX],
        node[RL_WIRE_NODE_MAX];
    static struct rl_wire_episode eps[RL_WIRE_TOP_MAX + 5];
    static struct rl_wire_str missing[RL_WIRE_MISSING_MAX + 3];
    struct rl_wire_decoder d;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_buf out;
    const char *p;
    size_t n, nput;

    memset(svc, 's', sizeof(svc));
    memset(ep, 'e', sizeof(ep));
    memset(user, 'u', sizeof(user));
    memset(node, 'n', sizeof(node));
    for (size_t i = 0; i < RL_WIRE_TOP_MAX + 5; i++) {
        eps[i].service = mkstr(svc, sizeof(svc));
        eps[i].endpoint = mkstr(ep, sizeof(ep));
        eps[i].user = mkstr(user, sizeof(user));
        eps[i].node = mkstr(node, sizeof(node));
        eps[i].start_ms = eps[i].end_ms = eps[i].refused = UINT64_MAX;
        eps[i].ended = RL_WIRE_ENDED_ALLOWED;
    }
    for (size_t i = 0; i < RL_WIRE_MISSING_MAX + 3; i++) {
        missing[i] = mkstr(node, sizeof(node));
    }
    ck_assert_int_eq(rl_wire_decoder_init(&d), 0);
    rl_buf_init(&out);
    ck_assert_int_eq(rl_wire_put_throttled_reply(&out, 3, eps, RL_WIRE_TOP_MAX + 5, missing,
                                                 RL_WIRE_MISSING_MAX + 3, &nput),
                     0);
    ck_assert_uint_gt(nput, 50);
    ck_assert_uint_lt(nput, RL_WIRE_TOP_MAX);
    p = one_frame(&out, &n);
    ck_assert_uint_le(n, RL_WIRE_FRAME_MAX);
    ck_assert_int_eq(rl_wire_decode_reply(&d, p, n, rep), 0);
    ck_assert_uint_eq(rep->nepisodes, nput);
    ck_assert_uint_eq(rep->nmissing, RL_WIRE_MISSING_MAX);
    /* Small ones: at most RL_WIRE_TOP_MAX go in. */
    for (size_t i = 0; i < RL_WIRE_TOP_MAX + 5; i++) {
        fill_ep(&eps[i], "s", NULL, "u", "n", i, RL_WIRE_ENDED_OPEN);
    }
    rl_buf_reset(&out);
    ck_assert_int_eq(
        rl_wire_put_throttled_reply(&out, 3, eps, RL_WIRE_TOP_MAX + 5, NULL, 0, &nput), 0);
    ck_assert_uint_eq(nput, RL_WIRE_TOP_MAX);
    rl_wire_decoder_deinit(&d);
    rl_buf_deinit(&out);
    free(rep);
}
END_TEST

START_TEST(test_throttled_reply_strict)
{
    /* [7, 1, [], []] */
    ck_assert_int_eq(reply_rc(RAW(0x94, 0x07, 0x01, 0x90, 0x90)), 0);
    ck_assert_int_eq(reply_rc(RAW(0x93, 0x07, 0x01, 0x90)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x95, 0x07, 0x01, 0x90, 0x90, 0x90)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x94, 0x07, 0x01, 0x80, 0x90)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x94, 0x07, 0x01, 0x90, 0x91, 0x01)), -EPROTO);
    ck_assert_int_eq(reply_rc(RAW(0x94, 0x07, 0x01, 0x91, 0x80, 0x90)), -EPROTO);
    {
        /* One good episode, then each way of breaking it. */
        static const unsigned char good[] = {
            0x94, 0x07, 0x01, 0x91, 0x88,
            0xa7, 's', 'e', 'r', 'v', 'i', 'c', 'e', 0xa1, 's',
            0xa8, 'e', 'n', 'd', 'p', 'o', 'i', 'n', 't', 0xc0,
            0xa4, 'u', 's', 'e', 'r', 0xa1, 'u',
            0xa8, 's', 't', 'a', 'r', 't', '_', 'm', 's', 0x01,
            0xa6, 'e', 'n', 'd', '_', 'm', 's', 0x00,
            0xa7, 'r', 'e', 'f', 'u', 's', 'e', 'd', 0x05,
            0xa5, 'e', 'n', 'd', 'e', 'd', 0xa4, 'o', 'p', 'e', 'n',
            0xa4, 'n', 'o', 'd', 'e', 0xa1, 'a',
            0x91, 0xa1, 'b'};
        unsigned char bad[sizeof(good)];
        struct rl_wire_decoder d;
        struct rl_wire_reply *rep = malloc(sizeof(*rep));

        ck_assert_int_eq(rl_wire_decoder_init(&d), 0);
        ck_assert_int_eq(rl_wire_decode_reply(&d, (const char *)good, sizeof(good), rep), 0);
        ck_assert_uint_eq(rep->nepisodes, 1);
        ck_assert_uint_eq(rep->episodes[0].refused, 5);
        ck_assert_uint_eq(rep->episodes[0].ended, RL_WIRE_ENDED_OPEN);
        ck_assert_ptr_null(rep->episodes[0].endpoint.ptr);
        ck_assert(str_is(rep->missing[0], "b"));
        /* "ended" not one of the three */
        memcpy(bad, good, sizeof(good));
        bad[sizeof(good) - 13] = 'x';
        ck_assert_int_eq(reply_rc((const char *)bad, sizeof(bad)), -EPROTO);
        /* an unknown key ("xode" for "node") */
        memcpy(bad, good, sizeof(good));
        bad[sizeof(good) - 8] = 'x';
        ck_assert_int_eq(reply_rc((const char *)bad, sizeof(bad)), -EPROTO);
        /* a key twice */
        memcpy(bad, good, sizeof(good));
        memcpy(bad + sizeof(good) - 10, "\xa4user", 5); /* "node" -> "user" again */
        ck_assert_int_eq(reply_rc((const char *)bad, sizeof(bad)), -EPROTO);
        /* refused negative */
        memcpy(bad, good, sizeof(good));
        bad[sizeof(good) - 22] = 0xff;
        ck_assert_int_eq(reply_rc((const char *)bad, sizeof(bad)), -EPROTO);
        /* missing name as a number */
        memcpy(bad, good, sizeof(good));
        bad[sizeof(good) - 2] = 0x01;
        bad[sizeof(good) - 1] = 0x01;
        ck_assert_int_eq(reply_rc((const char *)bad, sizeof(bad) - 1), -EPROTO);
        rl_wire_decoder_deinit(&d);
        free(rep);
    }
}
END_TEST

static Suite *
wire_suite(void)
{
    Suite *s = suite_create("wire");
    TCase *tc = tcase_create("codec");
    TCase *fz = tcase_create("fuzz");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_known_answer);
    tcase_add_test(tc, test_adjust_roundtrip);
    tcase_add_test(tc, test_release_roundtrip);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_docs_match);
    tcase_add_test(tc, test_docs_ops);
    tcase_add_test(tc, test_op_table);
    tcase_add_test(tc, test_put_req);
    tcase_add_test(tc, test_roundtrip_requests);
    tcase_add_test(tc, test_roundtrip_replies);
    tcase_add_test(tc, test_encode_limits);
    tcase_add_test(tc, test_frame_split);
    tcase_add_test(tc, test_frame_bounds);
    tcase_add_test(tc, test_not_one_value);
    tcase_add_test(tc, test_hostile_headers);
    tcase_add_test(tc, test_not_a_request);
    tcase_add_test(tc, test_unknown_op);
    tcase_add_test(tc, test_arity);
    tcase_add_test(tc, test_check_types);
    tcase_add_test(tc, test_inline_limit);
    tcase_add_test(tc, test_check_bounds);
    tcase_add_test(tc, test_clock_field);
    tcase_add_test(tc, test_auth_field);
    tcase_add_test(tc, test_reply_strict);
    tcase_add_test(tc, test_hot_roundtrip);
    tcase_add_test(tc, test_handoff_roundtrip);
    tcase_add_test(tc, test_throttled_roundtrip_request);
    tcase_add_test(tc, test_throttled_bad_requests);
    tcase_add_test(tc, test_throttled_roundtrip_reply);
    tcase_add_test(tc, test_throttled_reply_fits_frame);
    tcase_add_test(tc, test_throttled_reply_strict);
    suite_add_tcase(s, tc);
    /* 100k decodes take well under a second, but several under the sanitizers. */
    tcase_set_timeout(fz, 120);
    tcase_add_test(fz, test_fuzz);
    suite_add_tcase(s, fz);
    return s;
}

RL_TEST_MAIN(wire_suite)

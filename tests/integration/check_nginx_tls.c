/*
 * check_nginx_tls: the OpenResty client (clients/lua/ratelimiter.lua) speaking TLS to a real
 * rl-router with [cluster] tls_* (and the router mutual TLS to its rl-node), in a real nginx
 * (Debian's nginx with libnginx-mod-http-lua) whose lua_ssl_trusted_certificate is a
 * throwaway CA made at test time. Asserted: with tls = true the decisions are the node's
 * (ALLOWED, ALLOWED, then LIMITED under fixed_window 2 per 1h); without it the router's
 * plaintext "TLS is required" comes back as the error; with tls_server_name naming another
 * host the handshake is refused (the name is checked only when asked for).
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "httpget.h"
#include "rltest.h"

#define T_TIMEOUT 5000

static const char lua_dir[] = RL_SOURCE_DIR "/clients/lua";

static const char nginx_conf[] =
    "load_module /usr/lib/nginx/modules/ndk_http_module.so;\n"
    "load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;\n"
    "daemon off;\nmaster_process off;\nworker_processes 1;\n"
    "error_log %s/error.log warn;\npid %s/nginx.pid;\n"
    "events { worker_connections 64; }\n"
    "http {\n"
    "  access_log off;\n"
    "  client_body_temp_path %s/tmp; proxy_temp_path %s/tmp; fastcgi_temp_path %s/tmp;\n"
    "  uwsgi_temp_path %s/tmp; scgi_temp_path %s/tmp;\n"
    "  lua_package_path \"%s/?.lua;/usr/share/lua/5.1/?.lua;;\";\n"
    "  lua_socket_log_errors off;\n"
    "  lua_ssl_trusted_certificate %s/ca.pem;\n"
    "  lua_ssl_verify_depth 2;\n"
    "  init_by_lua_block {\n"
    "    require(\"ratelimiter\").configure{ host = \"127.0.0.1\", port = %d, timeout = 5000 }\n"
    "  }\n"
    "  server {\n"
    "    listen 127.0.0.1:%d;\n"
    "    location / {\n"
    "      content_by_lua_block {\n"
    "        local rl = require \"ratelimiter\"\n"
    "        local a = ngx.var.arg_mode\n"
    "        local o = { service = \"api\", user = \"ngx\" }\n"
    "        if a == \"tls\" or a == \"name\" then o.tls = true end\n"
    "        if a == \"name\" then o.tls_server_name = \"wrong.example\" end\n"
    "        local r, err = rl.check(o)\n"
    "        ngx.say(r and r.code_name or (\"ERR \" .. tostring(err)))\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "}\n";

static const char *
body_of(int port, const char *mode, char *buf, size_t len)
{
    struct rl_http_resp r = {0};
    char path[64];
    int rc;

    snprintf(path, sizeof(path), "/?mode=%s", mode);
    rc = rl_http_get(port, path, T_TIMEOUT, &r);
    ck_assert_msg(rc == 0, "GET %s: %s", path, strerror(-rc));
    ck_assert_int_eq(r.status, 200);
    snprintf(buf, len, "%s", r.body);
    rl_http_free(&r);
    return buf;
}

START_TEST(test_lua_tls)
{
    const char *dir = rl_harness_tmpdir();
    struct rl_harness_server node = {0}, router = {0};
    char conf[4096], ngdir[4096], ngconf[4096], nglog[4096], tmp[4096], b[512];
    int nport = rl_harness_free_port(), rport = rl_harness_free_port();
    int ngport = rl_harness_free_port(), st = 0;
    pid_t ng = 0;

    ck_assert_msg(access("/usr/lib/nginx/modules/ngx_http_lua_module.so", R_OK) == 0,
                  "nginx with the lua module is needed (libnginx-mod-http-lua: scripts/deps.sh)");
    ck_assert_int_eq(rl_harness_tls_ca(dir, "ca"), 0);
    ck_assert_int_eq(rl_harness_tls_cert(dir, "member", "ca"), 0);
    ck_assert_int_eq(rl_harness_tmppath(conf, sizeof(conf), "tls.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "[cluster]\ntls_cert_file = %s/member.pem\n"
                                           "tls_key_file = %s/member.key\n"
                                           "tls_ca_file = %s/ca.pem\n"
                                           /* the first CHECK waits for the router's
                                            * first TLS connection to the node (slow under
                                            * ASan): within the deadline, not FAIL_OPEN */
                                           "[router]\nlisten = 127.0.0.1:%d\n"
                                           "deadline = 3s\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[service api]\nlimit = fixed_window 2 per 1h\n",
                                           dir, dir, dir, rport, nport),
                     0);
    ck_assert_int_eq(rl_harness_node_start(&node, conf, "a", nport, 0), 0);
    ck_assert_int_eq(rl_harness_router_start(&router, conf, rport), 0);
    ck_assert_int_eq(rl_harness_tmppath(ngdir, sizeof(ngdir), "nginx"), 0);
    ck_assert_int_eq(rl_harness_tmppath(tmp, sizeof(tmp), "nginx/tmp"), 0);
    ck_assert_int_eq(mkdir(ngdir, 0700), 0);
    ck_assert_int_eq(mkdir(tmp, 0700), 0);
    ck_assert_int_eq(rl_harness_tmppath(ngconf, sizeof(ngconf), "nginx/nginx.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(ngconf, nginx_conf, ngdir, ngdir, ngdir, ngdir,
                                           ngdir, ngdir, ngdir, lua_dir, dir, rport, ngport),
                     0);
    ck_assert_int_eq(rl_harness_tmppath(nglog, sizeof(nglog), "nginx/stderr.log"), 0);
    {
        char errlog[4200];
        const char *argv[] = {"nginx", "-p", ngdir, "-c", ngconf, "-e", errlog, NULL};

        snprintf(errlog, sizeof(errlog), "%s/error.log", ngdir);
        ck_assert_int_eq(rl_harness_spawn(argv, nglog, &ng), 0);
        if (rl_harness_wait_port("127.0.0.1", ngport, RL_HARNESS_START_TIMEOUT_MS) != 0) {
            rl_harness_print_log(nglog, 30);
            rl_harness_print_log(errlog, 30);
            ck_abort_msg("nginx does not listen on %d", ngport);
        }
    }
    ck_assert_str_eq(body_of(ngport, "tls", b, sizeof(b)), "ALLOWED\n");
    ck_assert_str_eq(body_of(ngport, "tls", b, sizeof(b)), "ALLOWED\n");
    ck_assert_str_eq(body_of(ngport, "tls", b, sizeof(b)), "LIMITED\n");
    body_of(ngport, "plain", b, sizeof(b));
    ck_assert_msg(strstr(b, "TLS is required") != NULL, "%s", b);
    body_of(ngport, "name", b, sizeof(b));
    ck_assert_msg(strstr(b, "ERR TLS:") != NULL, "%s", b);
    ck_assert_int_eq(rl_harness_stop(ng, SIGQUIT, 5000, &st), 0);
    rl_harness_server_stop(&router, SIGTERM, T_TIMEOUT);
    rl_harness_server_stop(&node, SIGTERM, T_TIMEOUT);
}
END_TEST

static Suite *
nginx_tls_suite(void)
{
    Suite *s = suite_create("nginx_tls");
    TCase *tc = tcase_create("nginx_tls");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_lua_tls);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(nginx_tls_suite)

/*
 * check: the smallest useful program on librlclient. Connects to a router, asks CHECK for
 * (SERVICE, USER) COUNT times and prints each reply, the HTTP answer a gateway would give
 * and its headers (docs/INTEGRATION.md). Needs only the installed library:
 *
 *   cc -o check check.c $(pkg-config --cflags --libs ratelimiter)
 *   ./check 127.0.0.1:7400 checkout alice 2
 *
 * Set RL_TOKEN_FILE to a token file when the router wants AUTH. Exit status: 0 when every
 * call got a reply, 1 when the router could not be reached or a call failed (the answer
 * printed is then the client-side failure policy, here "closed"), 2 for bad usage.
 */
#include <stdio.h>
#include <stdlib.h>

#include <ratelimiter/ratelimiter.h>

int
main(int argc, char **argv)
{
    struct rlc_http_answer ans;
    struct rlc_reply rep;
    rlc_client *c = NULL;
    char headers[2048], why[256];
    int count = argc > 4 ? atoi(argv[4]) : 1, rc, status = 0;

    if (argc < 4 || argc > 5 || count < 1) {
        fprintf(stderr, "usage: check HOST:PORT SERVICE USER [COUNT]\n");
        return 2;
    }
    rc = rlc_connect_addr(&c, argv[1], 1000);
    if (rc == 0) {
        rc = rlc_auth_file(c, NULL, 1000, why, sizeof(why));
        if (rc != 0) {
            fprintf(stderr, "check: %s\n", why);
        }
    }
    for (int i = 0; i < count; i++) {
        if (rc == 0) {
            rc = rlc_check(c, argv[2], argv[3], NULL, 1, &rep, 1000);
        }
        if (rc != 0) {
            /* No decision: the client's own failure policy answers ("closed" here). */
            printf("error: %s\n", rlc_strerror(rc));
            rlc_http_unreachable(1, &ans);
            status = 1;
        } else {
            printf("%s limit=%llu remaining=%llu reset_ms=%llu retry_after_ms=%llu\n",
                   rlc_code_name(rep.code), (unsigned long long)rep.limit,
                   (unsigned long long)rep.remaining, (unsigned long long)rep.reset_ms,
                   (unsigned long long)rep.retry_after_ms);
            rlc_http_answer(&rep, argv[2], 0, 0, &ans);
        }
        if (ans.status == 0) {
            printf("HTTP: pass on%s\n", ans.wait_ms > 0 ? " after waiting" : "");
        } else {
            printf("HTTP: %d %s\n", ans.status, rlc_http_reason(ans.status));
        }
        if (rlc_http_format(&ans, headers, sizeof(headers)) >= 0) {
            fputs(headers, stdout);
        }
        rc = 0;
    }
    rlc_close(c);
    return status;
}

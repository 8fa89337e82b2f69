/*
 * rules_bench: what a large rules push costs a node's loop (docs/BENCHMARKS.md, "Under
 * abuse"): for N services, the parse of the rules text (rl_conf_parse_rules), the swap into
 * the live conf (rl_conf_swap_rules) and the limiter's remap (rl_limiter_set_rules), and the
 * render of the limiter's metric families (rl_limiter_metrics): formatted at once (render_ms,
 * what a scrape cost the loop before the formatting moved off it), and as a scrape does it
 * now: the copy of the figures on the loop (loop_ms) and the formatting the listener's HTTP
 * thread does (format_ms); both pages must be the same bytes. Usage: rules_bench [N ...]
 * (default 20000 60000). Not a test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "conf.h"
#include "limiter.h"
#include "metrics.h"
#include "ruleset.h"

static double
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* N [service sNNNNNN] sections; variant shifts every limit so no tier keeps its seed. */
static char *
gen(unsigned n, unsigned variant)
{
    size_t cap = (size_t)n * 96 + 64, len = 0;
    char *s = malloc(cap);

    for (unsigned i = 0; s != NULL && i < n; i++) {
        len += (size_t)snprintf(s + len, cap - len,
                                "[service s%06u]\nlimit = token_bucket %u per 1s burst %u\n", i,
                                100 + variant, 200 + variant);
    }
    return s;
}

static struct rl_conf *
parse(unsigned n, unsigned variant, double *ms)
{
    char err[512];
    struct rl_conf *c = NULL;
    char *text = gen(n, variant);
    double t0 = now_ms();

    if (text == NULL || rl_conf_parse_rules("bench", text, &c, err, sizeof(err)) != 0) {
        fprintf(stderr, "rules_bench: %u services do not parse: %s\n", n, err);
        exit(1);
    }
    *ms = now_ms() - t0;
    free(text);
    return c;
}

int
main(int argc, char **argv)
{
    unsigned def[] = {20000, 60000};
    int nn = argc > 1 ? argc - 1 : 2;

    printf("%8s %10s %10s %12s %10s %10s %10s %10s\n", "services", "parse_ms", "swap_ms",
           "set_rules_ms", "render_ms", "loop_ms", "format_ms", "page_MB");
    for (int k = 0; k < nn; k++) {
        unsigned n = argc > 1 ? (unsigned)strtoul(argv[k + 1], NULL, 10) : def[k];
        double tparse, tp2, t0, tswap, tset, trender, tloop, tfmt;
        struct rl_conf *live = parse(n, 0, &tparse), *fresh = parse(n, 1, &tp2);
        struct rl_limiter *l = NULL;
        struct rl_buf b, text, page;
        struct rl_prom p = {.out = &b, .err = 0};
        struct rl_prom q = {.out = &text, .err = 0};
        struct rl_prom_later later = {NULL, 0, 0};

        if (rl_limiter_create(&l, live, 64u << 20) != 0) {
            return 1;
        }
        t0 = now_ms();
        if (rl_conf_swap_rules(live, fresh, NULL, 0) != 0) {
            return 1;
        }
        tswap = now_ms() - t0;
        t0 = now_ms();
        if (rl_limiter_set_rules(l, live, NULL) != 0) {
            return 1;
        }
        tset = now_ms() - t0;
        rl_buf_init(&b);
        t0 = now_ms();
        rl_limiter_metrics(l, &p);
        trender = now_ms() - t0;
        rl_buf_init(&text);
        rl_buf_init(&page);
        q.later = &later;
        t0 = now_ms();
        rl_limiter_metrics(l, &q);
        tloop = now_ms() - t0;
        t0 = now_ms();
        if (q.err != 0 || rl_prom_later_finish(&later, &text, &page) != 0) {
            return 1;
        }
        tfmt = now_ms() - t0;
        if (page.len != b.len || memcmp(page.data, b.data, b.len) != 0) {
            fprintf(stderr, "rules_bench: the page formatted later differs from the one "
                            "formatted at once\n");
            return 1;
        }
        printf("%8u %10.1f %10.2f %12.1f %10.1f %10.2f %10.1f %10.2f\n", n, tparse, tswap, tset,
               trender, tloop, tfmt, (double)b.len / 1e6);
        rl_buf_deinit(&b);
        rl_buf_deinit(&text);
        rl_buf_deinit(&page);
        rl_prom_later_deinit(&later);
        rl_limiter_destroy(l);
        rl_conf_destroy(fresh);
        rl_conf_destroy(live);
    }
    return 0;
}

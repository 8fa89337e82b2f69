/*
 * report: the page of a run (rl-chaos run ... --report DIR; docs/CHAOS.md, "The report
 * page"). While the run goes it keeps what the page draws in bounded memory: per 100 ms of
 * the run, the answers by outcome (counted when they came) and a latency histogram (of the
 * requests sent in those 100 ms), and when each step began, was done and ended. After the
 * verdict it writes DIR/index.html: one self-contained file (inline data, inline script
 * drawing SVG, nothing fetched) with the timeline, each fault's interval shaded and
 * labelled, and the verdict beside it. Every function takes a NULL report and then does
 * nothing, so the run calls them whether or not a page was asked for.
 * Not the judging (verdict.c writes the verdict's JSON, which the page embeds).
 */
#ifndef RL_CHAOS_REPORT_H
#define RL_CHAOS_REPORT_H

#include <stdint.h>

#include "scenario.h"

struct ch_run;
struct ch_report;

#define CH_REPORT_BUCKET_MS 100

/* What an answer counts as on the page: wire codes 0..3 as themselves; any other code and
 * ERROR replies as "error"; CH_CODE_LOST as "lost" (chaos.h). The two backstop outcomes are
 * the answers a router's own backstop limiter decided: on the wire they are FAIL_OPEN (an
 * allowance) and LIMITED (a refusal), and are counted so while the run goes; after it,
 * ch_report_backstop moves them out of those series by the routers' request logs. */
enum ch_outcome {
    CH_OUT_ALLOWED,
    CH_OUT_LIMITED,
    CH_OUT_FAIL_OPEN,
    CH_OUT_FAIL_CLOSED,
    CH_OUT_BACKSTOP_ALLOWED,
    CH_OUT_BACKSTOP_LIMITED,
    CH_OUT_ERROR,
    CH_OUT_LOST,
    CH_OUT_UNSENT, /* due while no router could be reached: never sent */
    CH_OUT_COUNT
};

/* The moments of a step: begun (before it is carried out), done (carried out), ended (its
 * `for` is over and it was undone). */
enum ch_step_mark { CH_STEP_BEGIN, CH_STEP_DONE, CH_STEP_END };

/* A report for sc's run (its buckets cover the run and its last answers), or NULL without
 * memory. About 1 KB per 100 ms of the run. */
struct ch_report *ch_report_new(const struct ch_scenario *sc);
void ch_report_free(struct ch_report *rep);

/* Traffic starts: t0_ms (wall clock) and t0_us (monotonic) are the same instant, the
 * origin of every time on the page. */
void ch_report_start(struct ch_report *rep, int64_t t0_ms, int64_t t0_us);
/* Traffic stops (wall clock): a fault still open ends here on the page. */
void ch_report_stop(struct ch_report *rep, int64_t t_ms);

/* An answer (code as in struct ch_req) to a request sent at t_send_us, come (or lost) at
 * t_done_us, both monotonic. Any thread; lock-free. */
void ch_report_answer(struct ch_report *rep, uint8_t code, int64_t t_send_us, int64_t t_done_us);
/* A request due at now_us (monotonic) that could not be sent: no router. */
void ch_report_unsent(struct ch_report *rep, int64_t now_us);

/* Step si of the scenario reached mark at t_ms (wall clock). The main thread's. */
void ch_report_step(struct ch_report *rep, int si, enum ch_step_mark mark, int64_t t_ms);

/*
 * After the run, the routers stopped: reads one router's request log (common/reqline.h's
 * lines; rl-chaos configures every router with one, every request logged, when a page is
 * asked for) and counts each backstop answer (NODE `backstop`) in the 100 ms bucket of its
 * time (the log's wall clock against the run's start). A missing log counts nothing.
 * 0, or -errno when the file cannot be read. The main thread's.
 */
int ch_report_read_reqlog(struct ch_report *rep, const char *path);
/*
 * Then, once: moves the backstop answers read out of the series they were counted in (a
 * backstop allowance out of fail_open, a refusal out of limited) into the two backstop
 * series. A router logs an answer before it sends it, so a client counts it in the same
 * bucket or a later one (or, the two clocks agreeing to a few ms only, the one before): what
 * a bucket cannot give is taken from the one before, then from the next ones. What no
 * bucket can give (answers the client never got: lost, or a router killed before its log
 * was written) stays counted as unmatched, and the page says how many.
 */
void ch_report_backstop(struct ch_report *rep);

/* The outcome an answer's code counts as. */
enum ch_outcome ch_report_outcome(uint8_t code);

/* The histogram bin of a latency (us), and the latency (us) a bin stands for: its middle.
 * Bins are exact below 8 us, then 8 a power of two (within 6.25% of the value). */
int ch_report_lat_bin(int64_t us);
double ch_report_bin_us(int bin);

/*
 * Writes DIR/index.html for the finished run r, embedding the verdict's JSON read from
 * verdict_json (NULL or unreadable: the page says there was none). 0, or -1 with the
 * reason printed.
 */
int ch_report_write(const struct ch_report *rep, const struct ch_run *r, const char *dir,
                    const char *verdict_json);

/* The page's markup and script (report_page.c): the document up to the data, and after. */
extern const char ch_report_page_head[];
extern const char ch_report_page_tail[];

#endif

/*
 * logs: rl-rebalance's gathering of the routers' request logs. Scans each LOG argument ("-"
 * for standard input) in turn into one rl_logscan (logscan.h), reporting each file's lines
 * and malformed lines as it goes and timing the whole scan; a progress line on a terminal's
 * stderr unless --quiet. SIGINT or SIGTERM stop the scan early, which is not an error: the
 * caller sees *r->stop and writes nothing. The totals are for report.h.
 */
#ifndef RB_LOGS_H
#define RB_LOGS_H

#include "run.h"

/* Fills r->scan and r->scan_secs; returns 0 (also when stopped) or RB_EXIT_FAIL. */
int rb_scan_logs(struct rb_run *r);

#endif

/*
 * What the benchmark programs that write a trace share: a wall clock and
 * the check that reports a failed recorder call.
 */
#ifndef GT_BENCH_BENCH_H
#define GT_BENCH_BENCH_H

#include <stdio.h>
#include <time.h>

#include <gradtrace/recorder.h>

/* Seconds on the monotonic clock (for differences only). */
static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Run a recorder call; if it fails, print `error: <call>: <why> (<recorder
 * message>)` and goto out. Needs the handle `r` and a label `out` in scope. */
#define CHECK(call)                                                                      \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ != 0) {                                                                  \
            printf("error: %s: %s (%s)\n", #call, gt_strerror(rc_),                      \
                   gt_recorder_errmsg(r));                                               \
            goto out;                                                                    \
        }                                                                                \
    } while (0)

#endif

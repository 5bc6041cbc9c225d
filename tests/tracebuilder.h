/*
 * The start of a tiny trace builder for tests that write traces by hand
 * through the recorder API (test_diagnose, test_replay): a recorder handle
 * with float32, cpu and one thread interned, and helpers to intern a string
 * and a one-frame user stack. Each test file adds the event helpers it needs.
 *
 * Define before including (after <cmocka.h>):
 *   TB_PATH_PREFIX  trace files are /tmp/<prefix>_<pid>_<name>.db
 *   TB_SOURCE_FILE  the file name of every user frame, e.g. "model.py"
 */
#ifndef GT_TESTS_TRACEBUILDER_H
#define GT_TESTS_TRACEBUILDER_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <gradtrace/recorder.h>

#if !defined(TB_PATH_PREFIX) || !defined(TB_SOURCE_FILE)
#error "define TB_PATH_PREFIX and TB_SOURCE_FILE before including tracebuilder.h"
#endif

typedef struct tb {
    gt_recorder *r;
    char path[256];
    gt_id dtype, thread, cpu;
} tb;

/* Create the trace for `name` (overwriting) and intern float32, cpu and
 * thread 1 "main". */
static inline void tb_open(tb *b, const char *name)
{
    gt_recorder_options o = {.overwrite = 1};
    char err[256];
    snprintf(b->path, sizeof b->path, "/tmp/" TB_PATH_PREFIX "_%d_%s.db", (int)getpid(),
             name);
    assert_int_equal(gt_recorder_open(b->path, &o, err, sizeof err, &b->r), 0);
    assert_int_equal(gt_intern_string(b->r, "float32", 7, &b->dtype), 0);
    assert_int_equal(gt_intern_string(b->r, "cpu", 3, &b->cpu), 0);
    assert_int_equal(gt_intern_thread(b->r, 1, "main", &b->thread), 0);
}

static inline gt_id tb_str(tb *b, const char *s)
{
    gt_id id;
    assert_int_equal(gt_intern_string(b->r, s, strlen(s), &id), 0);
    return id;
}

/* A stack of one user frame: TB_SOURCE_FILE:line in <module>. */
static inline gt_id tb_stack(tb *b, int line, const char *code)
{
    gt_id f, s;
    assert_int_equal(gt_intern_frame(b->r, TB_SOURCE_FILE, line, "<module>", code, &f),
                     0);
    assert_int_equal(gt_intern_stack(b->r, 0, f, f, &s), 0);
    return s;
}

#endif

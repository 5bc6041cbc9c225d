/*
 * A temporary directory per test program, for tests that write trace files.
 * Define GT_TMPDIR_PREFIX (e.g. "gt_test_recorder") before including; pass
 * setup_dir/teardown_dir to cmocka_run_group_tests. The directory is made
 * under $TMPDIR (default /tmp) and removed with everything in it.
 */
#ifndef GT_TESTS_TMPDIR_H
#define GT_TESTS_TMPDIR_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef GT_TMPDIR_PREFIX
#error "define GT_TMPDIR_PREFIX before including tmpdir.h"
#endif

static char tmpdir[256];

static int setup_dir(void **state)
{
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/" GT_TMPDIR_PREFIX "_XXXXXX",
             base && *base ? base : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int teardown_dir(void **state)
{
    (void)state;
    return nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* tmpdir/name, in one of four rotating buffers (so a call may pass two). */
__attribute__((unused)) static const char *tpath(const char *name)
{
    static char buf[4][4096];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", tmpdir, name);
    return buf[k];
}

#endif

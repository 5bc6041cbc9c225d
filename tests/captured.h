/*
 * Running a subcommand (cli/cmd.h's gt_cmd_*) in the test process with its
 * stdin given and its stdout and stderr captured (sqltrace.h includes it;
 * a test with its own trace builder includes it alone). Include after
 * <cmocka.h>.
 */
#ifndef GT_TESTS_CAPTURED_H
#define GT_TESTS_CAPTURED_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <fcntl.h>
#include <unistd.h>

/* Fail, showing both, unless `needle` occurs in `hay`. */
static inline void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fail_msg("missing:\n%s\n--- in:\n%s", needle, hay);
}

typedef struct captured {
    int status;
    char *out; /* malloc'd, NUL-terminated */
    char *err;
} captured;

static inline char *slurp_fd(int fd)
{
    off_t n = lseek(fd, 0, SEEK_END);
    assert_true(n >= 0);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(pread(fd, s, (size_t)n, 0), n);
    s[n] = '\0';
    return s;
}

static inline char *slurp_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    char *s = slurp_fd(fd);
    if (len)
        *len = (size_t)lseek(fd, 0, SEEK_END);
    close(fd);
    return s;
}

/* Run cmd(argc, argv) with stdin from `input` (NULL: empty) and stdout and
 * stderr captured into c. */
static inline void run_captured(int (*cmd)(int, char **), int argc, char **argv,
                                const char *input, captured *c)
{
    char tin[] = "/tmp/gt_test_inXXXXXX", tout[] = "/tmp/gt_test_outXXXXXX",
         terr[] = "/tmp/gt_test_errXXXXXX";
    int fin = mkstemp(tin), fout = mkstemp(tout), ferr = mkstemp(terr);
    assert_true(fin >= 0 && fout >= 0 && ferr >= 0);
    unlink(tin);
    unlink(tout);
    unlink(terr);
    if (input)
        assert_int_equal(write(fin, input, strlen(input)), (ssize_t)strlen(input));
    lseek(fin, 0, SEEK_SET);

    fflush(stdout);
    fflush(stderr);
    int sin = dup(0), sout = dup(1), serr = dup(2);
    dup2(fin, 0);
    dup2(fout, 1);
    dup2(ferr, 2);
    clearerr(stdin);
    c->status = cmd(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(sin, 0);
    dup2(sout, 1);
    dup2(serr, 2);
    clearerr(stdin);
    close(sin);
    close(sout);
    close(serr);
    c->out = slurp_fd(fout);
    c->err = slurp_fd(ferr);
    close(fin);
    close(fout);
    close(ferr);
}

static inline void captured_free(captured *c)
{
    free(c->out);
    free(c->err);
}

#endif

/*
 * gradtrace record [options] [--] script.py [args...]: run a Python script
 * under recording, exactly as `python3 script.py args...` would run it;
 * gradtrace record [options] -m module [args...]: run a module as
 * `python3 -m module args...` would.
 *
 * This command checks what it can before the script starts (the script, the
 * output path, the interpreter, the option values), then replaces itself
 * with `PYTHON -m gradtrace.run ...` (python/gradtrace/run.py),
 * which checks that the interpreter imports torch and the _gradtrace
 * extension, starts recording, runs the script with runpy and closes the
 * trace however the script ends; when the run failed with an error the
 * trace explains, it prints the diagnosis after the script's traceback. Every input error
 * is one line on stderr and exit status 2; otherwise the exit status is the script's.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cmd.h"
#include <gradtrace/multi.h>
#include <gradtrace/trace.h>

#ifndef GT_PYTHONPATH
#define GT_PYTHONPATH ""
#endif
#ifndef GT_DEFAULT_PYTHON
#define GT_DEFAULT_PYTHON "python3"
#endif

#define DEFAULT_OUTPUT "gradtrace.db"

/* Does directory dir hold a __main__ python3 would run (its .py or .pyc)? */
static int has_main(const char *dir)
{
    static const char *const names[] = {"__main__.py", "__main__.pyc"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t n = strlen(dir) + strlen(names[i]) + 2;
        char *p = malloc(n);
        if (!p)
            return 0;
        snprintf(p, n, "%s/%s", dir, names[i]);
        int ok = access(p, R_OK) == 0;
        free(p);
        if (ok)
            return 1;
    }
    return 0;
}

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: gradtrace record [options] [--] script.py [args...]\n"
        "       gradtrace record [options] -m module [args...]\n"
        "\n"
        "Run script.py as `python3 script.py args...` would (or a module as\n"
        "`python3 -m module args...` would), recording every aten op, tensor, version\n"
        "bump, autograd node, saved tensor and backward call.\n"
        "\n"
        "options:\n"
        "  -o, --output TRACE       trace file to write (default " DEFAULT_OUTPUT ")\n"
        "  -f, --force              replace TRACE whatever it is (by default a trace\n"
        "                           there is kept as TRACE.old, and a file that is not\n"
        "                           a trace is refused)\n"
        "  -m MODULE                run MODULE as a script, like python -m (the rest of\n"
        "                           the line is its arguments)\n"
        "  -q, --quiet              no status line on a terminal, no diagnosis when the\n"
        "                           run fails, and no line saying it records through\n"
        "                           the dispatch adapter\n"
        "  --python PY              interpreter that imports torch (default: "
        "$GRADTRACE_PYTHON,\n"
        "                           else %s)\n"
        "  --backward-calls A-B     record only backward calls A..B (1-based) and the "
        "ops\n"
        "                           from the end of call A-1 to the end of call B (so "
        "the\n"
        "                           forward feeding call A is included); 'A' means A-A\n"
        "  --check-saved            fingerprint (XXH3) the bytes of every saved CPU "
        "tensor\n"
        "                           at save and when its node runs, to catch writes "
        "autograd\n"
        "                           cannot see (NumPy views, DLPack, custom kernels)\n"
        "  --max-size SIZE          stop recording, with one warning, once the trace "
        "would\n"
        "                           grow past SIZE bytes (suffix K, M or G); the script\n"
        "                           runs on\n"
        "  --keep-last N            flight recorder: record all along but keep, in "
        "memory,\n"
        "                           only the last N backward calls (and the older "
        "tensors,\n"
        "                           nodes and stacks they use); TRACE is written at "
        "exit,\n"
        "                           at an exception, on SIGINT/SIGTERM and at "
        "--max-size\n"
        "  -h, --help               show this help\n"
        "\n"
        "When the run fails with an error gradtrace explains (a saved tensor modified\n"
        "in place, backward through a freed graph, an in-place op on a leaf), the\n"
        "diagnosis follows the script's traceback on stderr, as `gradtrace diagnose`\n"
        "prints it. At the end one line on stderr says where the trace is (after\n"
        "SIGINT or SIGTERM: that it holds the run up to the signal). While the script\n"
        "runs, a status line on stderr, when it is a terminal, shows the elapsed time,\n"
        "backward calls, events and the trace's size. The exit status is the script's.\n",
        GT_DEFAULT_PYTHON);
}

/* Parse "123", "64K", "10M", "1G" into bytes; -1 if malformed. */
static int64_t parse_size(const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v <= 0)
        return -1;
    int64_t mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1024, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1024 * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        mul = 1024 * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v > INT64_MAX / mul)
        return -1;
    return v * mul;
}

/* Parse "A-B" or "A" into first/last; 0 on success, -1 if malformed. */
static int parse_window(const char *s, long *first, long *last)
{
    char *end;
    errno = 0;
    long a = strtol(s, &end, 10);
    long b = a;
    if (errno || end == s)
        return -1;
    if (*end == '-') {
        const char *p = end + 1;
        b = strtol(p, &end, 10);
        if (errno || end == p)
            return -1;
    }
    if (*end || a < 1 || b < a)
        return -1;
    *first = a;
    *last = b;
    return 0;
}

/* 1 if `name` (a path, or a command looked up in PATH) is executable. */
static int executable(const char *name)
{
    if (strchr(name, '/'))
        return access(name, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path)
        return 0;
    char buf[PATH_MAX];
    while (*path) {
        size_t n = strcspn(path, ":");
        int w = snprintf(buf, sizeof buf, "%.*s/%s", (int)n, n ? path : ".", name);
        if (w > 0 && (size_t)w < sizeof buf && access(buf, X_OK) == 0)
            return 1;
        path += n;
        if (*path == ':')
            path++;
    }
    return 0;
}

/* 1 if the file at path is a gradtrace trace (an SQLite database with a
 * schema version and a run table), 0 if it is anything else or cannot be
 * read. gradtrace/_previous.py's is_trace is the runner's same test. */
static int is_trace(const char *path)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int yes = 0;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        goto out;
    if (gt_db_prepare(db,
                      "SELECT (SELECT user_version FROM pragma_user_version) > 0"
                      " AND EXISTS (SELECT 1 FROM sqlite_master"
                      "  WHERE type = 'table' AND name = 'run')",
                      &st) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        yes = sqlite3_column_int(st, 0);
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return yes;
}

/* Check that `out` can be created: 0, or -1 after printing why not. A
 * trace already there is the runner's to keep as OUT.old (as perf record
 * keeps perf.data.old); an empty file is replaced; any other file only
 * with --force. */
static int check_output(const char *out, int force)
{
    struct stat st;
    if (stat(out, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            fprintf(stderr, "gradtrace: cannot write trace %s: is a directory\n", out);
            return -1;
        }
        if (!force && st.st_size > 0 && !is_trace(out)) {
            fprintf(stderr,
                    "gradtrace: cannot write trace %s: the file exists and is not a "
                    "gradtrace trace; --force replaces it, or -o chooses another file\n",
                    out);
            return -1;
        }
        if (force && access(out, W_OK) != 0) {
            fprintf(stderr, "gradtrace: cannot write trace %s: %s\n", out,
                    strerror(errno));
            return -1;
        }
    }
    char *copy = strdup(out);
    if (!copy) {
        fprintf(stderr, "gradtrace: out of memory\n");
        return -1;
    }
    const char *dir = dirname(copy);
    int rc = 0;
    if (stat(dir, &st) != 0) {
        fprintf(stderr, "gradtrace: cannot write trace %s: directory %s does not exist\n",
                out, dir);
        rc = -1;
    } else if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "gradtrace: cannot write trace %s: %s is not a directory\n", out,
                dir);
        rc = -1;
    } else if (access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr, "gradtrace: cannot write trace %s: directory %s: %s\n", out, dir,
                strerror(errno));
        rc = -1;
    }
    free(copy);
    return rc;
}

/* PYTHONPATH = GT_PYTHONPATH[:old], keeping the old value for the runner
 * to restore before the script starts. An installed package has no
 * GT_PYTHONPATH: its interpreter imports gradtrace already. 0, or -1 on
 * failure. */
static int setup_env(void)
{
    if (!*GT_PYTHONPATH)
        return 0;
    const char *old = getenv("PYTHONPATH");
    size_t n = strlen(GT_PYTHONPATH) + (old ? strlen(old) : 0) + 2;
    char *pp = malloc(n);
    char *orig = malloc((old ? strlen(old) : 0) + 2);
    int rc = -1;
    if (!pp || !orig)
        goto out;
    if (old && *old)
        snprintf(pp, n, "%s:%s", GT_PYTHONPATH, old);
    else
        snprintf(pp, n, "%s", GT_PYTHONPATH);
    /* "=value" if PYTHONPATH was set, "" if it was not */
    snprintf(orig, (old ? strlen(old) : 0) + 2, "%s%s", old ? "=" : "", old ? old : "");
    if (setenv("PYTHONPATH", pp, 1) < 0 ||
        setenv("GRADTRACE_ORIG_PYTHONPATH", orig, 1) < 0)
        goto out;
    rc = 0;
out:
    free(pp);
    free(orig);
    return rc;
}

/* What `gradtrace record` was asked to do: the options, and the script (or
 * module) with its arguments. */
struct record_opts {
    const char *out;    /* -o TRACE */
    const char *python; /* --python PY, NULL for the environment's choice */
    const char *window; /* --backward-calls as given, NULL without it */
    const char *module; /* -m MODULE, NULL for a script */
    int force, quiet, check_saved;
    int64_t max_size; /* --max-size in bytes, 0 without it */
    long first, last; /* --backward-calls A-B */
    long keep_last;   /* --keep-last N, 0 without it */
    char **args;      /* the script (unless -m) and its arguments */
    int nargs;        /* how many */
};

/* parse_options' return when the command goes on to run the script */
#define RECORD_RUN (-1)

/* Parse --keep-last's value into o->keep_last: 0, or 2 (the exit status)
 * after printing why it is not a count from 1 to 1000000. */
static int parse_keep_last(const char *arg, struct record_opts *o)
{
    char *end;
    errno = 0;
    o->keep_last = strtol(arg, &end, 10);
    if (errno || end == arg || *end || o->keep_last < 1 || o->keep_last > 1000000) {
        fprintf(stderr,
                "gradtrace: invalid --keep-last '%s': expected a number of backward "
                "calls from 1 to 1000000\n",
                arg);
        return 2;
    }
    return 0;
}

/* Parse --backward-calls' value into o->first..o->last: 0, or 2 (the exit
 * status) after printing why it is not A-B with 1 <= A <= B. */
static int parse_backward_calls(const char *arg, struct record_opts *o)
{
    if (parse_window(arg, &o->first, &o->last) < 0) {
        fprintf(stderr,
                "gradtrace: invalid --backward-calls '%s': expected A-B with "
                "1 <= A <= B\n",
                arg);
        return 2;
    }
    o->window = arg;
    return 0;
}

/* Parse --max-size's value into o->max_size: 0, or 2 (the exit status)
 * after printing why it is not a positive size. */
static int parse_max_size(const char *arg, struct record_opts *o)
{
    o->max_size = parse_size(arg);
    if (o->max_size < 0) {
        fprintf(stderr,
                "gradtrace: invalid --max-size '%s': expected a positive size like "
                "500M\n",
                arg);
        return 2;
    }
    return 0;
}

/* After the options: refuse what cannot be combined and take the script
 * (or `-- -m module`) and its arguments from argv[optind...] into *o.
 * Returns RECORD_RUN, or 2 (the exit status) after printing a usage
 * error. */
static int take_script(int argc, char **argv, struct record_opts *o)
{
    if (o->keep_last && o->window)
        return gt_usage_error("record", usage,
                              "--keep-last and --backward-calls cannot be combined");
    /* `gradtrace record -- -m module` too, as python reads it */
    if (!o->module && optind + 1 < argc && !strcmp(argv[optind], "-m"))
        o->module = argv[optind + 1], optind += 2;
    if (o->module && !*o->module)
        return gt_usage_error("record", usage, "-m wants a module name");
    if (!o->module && optind >= argc)
        return gt_usage_error("record", usage, "no script given");
    o->args = argv + optind;
    o->nargs = argc - optind;
    return RECORD_RUN;
}

/* Parse the command line into *o (getopt_long, stopping at the script or
 * at -m MODULE, so the script's own options are left alone). Returns
 * RECORD_RUN when the script should run, else the exit status: 0 after
 * --help, 2 after printing a usage error or an invalid value. */
static int parse_options(int argc, char **argv, struct record_opts *o)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"force", no_argument, NULL, 'f'},
        {"python", required_argument, NULL, 'p'},
        {"backward-calls", required_argument, NULL, 'b'},
        {"max-size", required_argument, NULL, 's'},
        {"check-saved", no_argument, NULL, 'c'},
        {"keep-last", required_argument, NULL, 'k'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, rc = 0;

    memset(o, 0, sizeof *o);
    o->out = DEFAULT_OUTPUT;
    optind = 0;
    /* '+': stop at the script, so its own options are left alone; -m MODULE
     * ends the options the same way */
    while (!o->module &&
           (c = getopt_long(argc, argv, "+:o:fm:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            o->out = optarg;
            break;
        case 'f':
            o->force = 1;
            break;
        case 'm':
            o->module = optarg;
            break;
        case 'q':
            o->quiet = 1;
            break;
        case 'p':
            o->python = optarg;
            break;
        case 'c':
            o->check_saved = 1;
            break;
        case 'k':
            rc = parse_keep_last(optarg, o);
            break;
        case 'b':
            rc = parse_backward_calls(optarg, o);
            break;
        case 's':
            rc = parse_max_size(optarg, o);
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            return gt_usage_error("record", usage, "option '%s' needs a value",
                                  argv[optind - 1]);
        default:
            if (optopt > 0 && optopt < 256)
                return gt_usage_error("record", usage, "unknown option '-%c'", optopt);
            return gt_usage_error("record", usage, "unknown option '%s'",
                                  argv[optind - 1]);
        }
        if (rc)
            return rc;
    }
    return take_script(argc, argv, o);
}

/* Check that the script can run as python3 would run it: a readable regular
 * file, or a directory with a __main__. A module is the runner's to look up
 * (with the script's sys.path). 0, or 2 (the exit status) after printing
 * why not. */
static int check_script(const struct record_opts *o)
{
    const char *script;
    struct stat st;
    if (o->module)
        return 0;
    script = o->args[0];
    if (stat(script, &st) != 0) {
        fprintf(stderr, "gradtrace: cannot run script %s: %s\n", script, strerror(errno));
        return 2;
    }
    if (S_ISDIR(st.st_mode)) {
        /* as python3 dir/: the directory's __main__ runs */
        if (!has_main(script)) {
            fprintf(stderr, "gradtrace: cannot run script %s: no __main__.py in it\n",
                    script);
            return 2;
        }
    } else if (!S_ISREG(st.st_mode) || access(script, R_OK) != 0) {
        fprintf(stderr, "gradtrace: cannot run script %s: %s\n", script,
                S_ISREG(st.st_mode) ? strerror(errno) : "not a regular file");
        return 2;
    }
    return 0;
}

/* Choose the interpreter into o->python: --python, else $GRADTRACE_PYTHON,
 * else the installed package's launcher's, else GT_DEFAULT_PYTHON. 0, or 2
 * (the exit status) after printing that it is not an executable. */
static int choose_python(struct record_opts *o)
{
    const char *python = o->python;
    const char *how = "--python";
    /* the installed package's launcher names its own interpreter */
    const char *launcher = getenv("GRADTRACE_LAUNCHER_PYTHON");
    if (!python && (python = getenv("GRADTRACE_PYTHON")) && *python)
        how = "GRADTRACE_PYTHON";
    if ((!python || !*python) && launcher && *launcher) {
        python = launcher;
        how = "the interpreter gradtrace is installed for";
    }
    if (!python || !*python) {
        python = GT_DEFAULT_PYTHON;
        how = "default";
    }
    o->python = python;
    if (!executable(python)) {
        fprintf(stderr,
                "gradtrace: cannot run interpreter %s (%s): not found or not executable; "
                "choose one that imports torch with --python PATH or GRADTRACE_PYTHON\n",
                python, how);
        return 2;
    }
    return 0;
}

/* The runner's command line, NULL-terminated, into av (which has room for
 * o->nargs + 24 pointers); the numbers are written into the caller's
 * buffers, which must outlive av:
 *     PYTHON -m gradtrace.run --output OUT [--force] [--check-saved]
 *            [--max-size N] [--keep-last N] [--backward-calls A-B] [--quiet]
 *            [--module] -- script|module args...
 * This function can't fail. */
static void runner_argv(const struct record_opts *o, char **av, char sizebuf[32],
                        char keepbuf[32], char winbuf[64])
{
    int k = 0;
    av[k++] = (char *)o->python;
    av[k++] = "-m";
    av[k++] = "gradtrace.run";
    av[k++] = "--output";
    av[k++] = (char *)o->out;
    if (o->force)
        av[k++] = "--force";
    if (o->check_saved)
        av[k++] = "--check-saved";
    if (o->max_size) {
        snprintf(sizebuf, 32, "%" PRId64, o->max_size);
        av[k++] = "--max-size";
        av[k++] = sizebuf;
    }
    if (o->keep_last) {
        snprintf(keepbuf, 32, "%ld", o->keep_last);
        av[k++] = "--keep-last";
        av[k++] = keepbuf;
    }
    if (o->window) {
        snprintf(winbuf, 64, "%ld-%ld", o->first, o->last);
        av[k++] = "--backward-calls";
        av[k++] = winbuf;
    }
    if (o->quiet)
        av[k++] = "--quiet";
    if (o->module)
        av[k++] = "--module";
    av[k++] = "--";
    if (o->module)
        av[k++] = (char *)o->module;
    for (int i = 0; i < o->nargs; i++)
        av[k++] = o->args[i];
    av[k] = NULL;
}

/* Replace this process with the runner: returns only on failure, with 2
 * (the exit status) after printing why. */
static int exec_runner(const struct record_opts *o)
{
    char **av = calloc((size_t)o->nargs + 24, sizeof *av);
    char sizebuf[32], winbuf[64], keepbuf[32];
    if (!av) {
        fprintf(stderr, "gradtrace: out of memory\n");
        return 2;
    }
    runner_argv(o, av, sizebuf, keepbuf, winbuf);
    fflush(NULL);
    execvp(o->python, av);
    fprintf(stderr, "gradtrace: cannot run interpreter %s: %s\n", o->python,
            strerror(errno));
    free(av);
    return 2;
}

int gt_cmd_record(int argc, char **argv)
{
    struct record_opts o;
    int rc = parse_options(argc, argv, &o);
    if (rc != RECORD_RUN)
        return rc;
    if (check_script(&o))
        return 2;
    /* under a launcher, this rank's trace (multi.h): the runner names it too */
    char *ranked = gt_env_rank_path(o.out);
    int bad = check_output(ranked ? ranked : o.out, o.force);
    free(ranked);
    if (bad < 0)
        return 2;
    if (choose_python(&o))
        return 2;
    if (setup_env() < 0) {
        fprintf(stderr, "gradtrace: cannot set up the environment: %s\n",
                strerror(errno));
        return 2;
    }
    /* the script's own children see no trace of the launcher */
    unsetenv("GRADTRACE_LAUNCHER_PYTHON");
    return exec_runner(&o);
}

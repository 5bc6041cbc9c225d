/*
 * libFuzzer harness for the trace reader: every input is written to a file
 * and run through the inspector's commands as a user would run them on a
 * trace somebody sent: gt_trace_open, then diagnose (text and --json), graph
 * (DOT and SVG), sql (the views and a few raw queries, table and JSON
 * output), info (text and JSON) and history (text and JSON).
 *
 * What counts as a bug: any sanitizer report, a crash, a hang (libFuzzer's
 * -timeout), or a command returning something other than 0, 1 (diagnose
 * found problems) or 2 (unreadable input) -- that last one aborts here so the
 * fuzzer keeps the input.
 *
 * Half of the mutations are libFuzzer's byte-level ones, half change the
 * input as a trace, with SQL (LLVMFuzzerCustomMutator, at the end).
 *
 * The commands' stdout and stderr go to /dev/null while they run; sanitizer
 * reports are sent to the real stderr (__sanitizer_set_report_fd).
 *
 * Build: cmake -DGT_FUZZ=ON with CC=clang (tests/fuzz/CMakeLists.txt); run:
 * tests/fuzz/run. With GT_FUZZ_VERBOSE=1 in the environment the commands'
 * output is not silenced (for reproducing one input by hand).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cmd.h"
#include "trace.h"

void __sanitizer_set_report_fd(void *fd);

int LLVMFuzzerInitialize(int *argc, char ***argv);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct harness {
    char dir[64];       /* private temp directory */
    char db[96];        /* dir/t.db: the input */
    char wal[96];       /* dir/t.db-wal, dir/t.db-shm: removed before each run */
    char shm[96];
    char dot[96];       /* dir/g.dot, dir/g.svg: graph outputs */
    char svg[96];
    int devnull;
    int saved_out;
    int saved_err;
    int verbose;
    int svg_always;
} harness;

static harness H;

static void cleanup(void)
{
    unlink(H.db);
    unlink(H.wal);
    unlink(H.shm);
    unlink(H.dot);
    unlink(H.svg);
    rmdir(H.dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(H.dir, sizeof H.dir, "%s/gtfuzz.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(H.dir)) {
        perror("fuzz_trace: mkdtemp");
        abort();
    }
    snprintf(H.db, sizeof H.db, "%s/t.db", H.dir);
    snprintf(H.wal, sizeof H.wal, "%s/t.db-wal", H.dir);
    snprintf(H.shm, sizeof H.shm, "%s/t.db-shm", H.dir);
    snprintf(H.dot, sizeof H.dot, "%s/g.dot", H.dir);
    snprintf(H.svg, sizeof H.svg, "%s/g.svg", H.dir);
    atexit(cleanup);
    H.verbose = getenv("GT_FUZZ_VERBOSE") != NULL;
    H.svg_always = getenv("GT_FUZZ_SVG") != NULL;
    H.devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    H.saved_out = dup(STDOUT_FILENO);
    H.saved_err = dup(STDERR_FILENO);
    if (H.devnull < 0 || H.saved_out < 0 || H.saved_err < 0) {
        perror("fuzz_trace: dup");
        abort();
    }
    __sanitizer_set_report_fd((void *)(intptr_t)H.saved_err);
    return 0;
}

static void silence(int on)
{
    if (H.verbose)
        return;
    fflush(stdout);
    fflush(stderr);
    dup2(on ? H.devnull : H.saved_out, STDOUT_FILENO);
    dup2(on ? H.devnull : H.saved_err, STDERR_FILENO);
}

/* Run one subcommand; abort (keeping the input) on an exit status that no
 * command documents. */
static int run(int (*cmd)(int, char **), int argc, const char *const *args)
{
    char *argv[16];
    char store[16][512];
    for (int i = 0; i < argc && i < 16; i++) {
        /* getopt may permute argv and sql writes into its --param values:
         * give each call its own writable copy. */
        snprintf(store[i], sizeof store[i], "%s", args[i]);
        argv[i] = store[i];
    }
    argv[argc] = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    silence(1);
    int st = cmd(argc, argv);
    silence(0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (getenv("GT_FUZZ_PROFILE"))
        fprintf(stderr, "%8.1f ms  %s %s\n", (t1.tv_sec - t0.tv_sec) * 1e3 +
                (t1.tv_nsec - t0.tv_nsec) / 1e6, args[0], args[argc - 1]);
    if (st < 0 || st > 2) {
        fprintf(stderr, "fuzz_trace: %s returned %d\n", args[0], st);
        abort();
    }
    return st;
}

static int write_input(const uint8_t *data, size_t size)
{
    unlink(H.wal);
    unlink(H.shm);
    int fd = open(H.db, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    close(fd);
    return 0;
}

/* The views and a few raw queries, grouped so each command runs several
 * statements (each command opens the trace and parses its schema again:
 * that is most of an iteration's time). A statement that fails stops its
 * group, so the views a hostile trace may have broken are spread out. */
static const struct {
    const char *mode;
    const char *sql;
} queries[] = {
    {"--table", "SELECT * FROM invalidations"},
    {"--json", "SELECT * FROM tensor_history; SELECT * FROM op_log; SELECT * FROM saved"},
    /* Not stack_frames: on a cycle in stacks.parent it never ends, even
     * under a LIMIT. Reported, like backward_reach below. */
    {"--csv", "SELECT * FROM backward_log; "
              "SELECT * FROM error_log; SELECT * FROM run"},
    /* Not backward_reach: on a cycle in edges its recursive CTE never ends
     * (it carries depth through a UNION); reported, see RELIABILITY-draft.md. */
    {"--tsv", "SELECT * FROM graph_edges; "
              "SELECT * FROM tensor_info; SELECT * FROM variables; "
              "SELECT * FROM saved_memory; SELECT * FROM mutations; "
              "SELECT * FROM events LIMIT 500"},
    {"--table", "PRAGMA quick_check"},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (write_input(data, size) != 0)
        return 0;

    /* The door every command goes through: a file it refuses needs no
     * further commands (they would refuse it the same way). */
    gt_trace *t = NULL;
    char err[1024];
    if (gt_trace_open(H.db, &t, err, sizeof err) != 0) {
        const char *a[] = {"info", H.db};
        if (run(gt_cmd_info, 2, a) != 2) {
            fprintf(stderr, "fuzz_trace: open refused the file (%s) but info did not\n",
                    err);
            abort();
        }
        return 0;
    }
    gt_trace_close(t);

    {
        const char *a[] = {"diagnose", "--color", "never", H.db};
        run(gt_cmd_diagnose, 4, a);
    }
    {
        const char *a[] = {"diagnose", "--json", H.db};
        run(gt_cmd_diagnose, 3, a);
    }
    {
        const char *a[] = {"graph", "-o", H.dot, H.db};
        run(gt_cmd_graph, 4, a);
    }
    {
        const char *a[] = {"graph", "--all", "-o", H.dot, H.db};
        run(gt_cmd_graph, 5, a);
    }
    /* Rendering through gvc/pango costs more than everything else together:
     * do it only for inputs whose size is a multiple of 4 -- every whole
     * SQLite file (a multiple of its page size), about a quarter of the
     * mutated ones -- so a given input always takes the same path
     * (GT_FUZZ_SVG=1: for every input). */
    if (size % 4 == 0 || H.svg_always) {
        const char *a[] = {"graph", "-o", H.svg, H.db};
        run(gt_cmd_graph, 4, a);
    }
    for (size_t i = 0; i < sizeof queries / sizeof queries[0]; i++) {
        const char *a[] = {"sql", queries[i].mode, H.db, queries[i].sql};
        run(gt_cmd_sql, 4, a);
    }
    {
        const char *a[] = {"info", H.db};
        run(gt_cmd_info, 2, a);
    }
    {
        const char *a[] = {"info", "--json", H.db};
        run(gt_cmd_info, 3, a);
    }
    {
        const char *a[] = {"history", "--reads", H.db, "class_weights"};
        run(gt_cmd_history, 4, a);
    }
    {
        const char *a[] = {"history", "--json", "--all", H.db, "1"};
        run(gt_cmd_history, 5, a);
    }
    return 0;
}

/* ---- structure-aware mutation ------------------------------------------
 *
 * Byte flips in an SQLite file mostly give "database disk image is
 * malformed", which the door refuses at once. Every other input is instead
 * mutated as a trace: loaded into an in-memory database, changed by one to
 * three SQL statements that break the rows' relations the way a damaged or
 * hostile trace would (an id pointing nowhere or into a cycle, a version or
 * size out of range, a wrong type, an enormous string, a deleted or
 * duplicated row), and written back. */

/* Columns worth breaking: ids, versions, sizes, JSON and text. */
static const struct {
    const char *table, *column;
} targets[] = {
    {"saved_tensors", "tensor"}, {"saved_tensors", "node"}, {"saved_tensors", "version"},
    {"saved_tensors", "slot"}, {"saved_tensors", "nbytes"}, {"saved_tensors", "is_output"},
    {"edges", "next"}, {"edges", "node"}, {"edges", "input_nr"},
    {"stacks", "parent"}, {"stacks", "frame"}, {"stacks", "user_frame"},
    {"frames", "file"}, {"frames", "line"}, {"frames", "code"}, {"frames", "function"},
    {"ops", "name"}, {"ops", "stack"}, {"ops", "phase"}, {"ops", "thread"},
    {"op_args", "tensor"}, {"op_args", "version"}, {"op_args", "role"}, {"op_args", "op"},
    {"version_bumps", "version"}, {"version_bumps", "tensor"}, {"version_bumps", "op"},
    {"tensors", "shape"}, {"tensors", "strides"}, {"tensors", "storage_offset"},
    {"tensors", "alias_of"}, {"tensors", "version_counter"}, {"tensors", "dtype"},
    {"tensors", "storage"}, {"tensors", "is_leaf"}, {"tensors", "created_by"},
    {"nodes", "op"}, {"nodes", "sequence_nr"}, {"nodes", "variable"}, {"nodes", "name"},
    {"node_outputs", "tensor"}, {"node_outputs", "node"},
    {"backward_calls", "seq"}, {"backward_calls", "end_seq"}, {"backward_calls", "status"},
    {"backward_calls", "api"}, {"backward_calls", "stack"},
    {"backward_roots", "node"}, {"backward_roots", "tensor"}, {"backward_roots", "backward"},
    {"backward_inputs", "tensor"}, {"node_execs", "node"}, {"node_execs", "backward"},
    {"errors", "message"}, {"errors", "backward"}, {"errors", "stack"}, {"errors", "type"},
    {"strings", "text"}, {"names", "tensor"}, {"names", "name"}, {"storages", "nbytes"},
    {"run", "status"}, {"run", "argv"}, {"run", "exit_code"}, {"run", "start_ns"},
};

static unsigned next_rand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffff;
}

/* A value for column c of a row: SQL text in buf. */
static void pick_value(unsigned *s, const char *c, char *buf, size_t n)
{
    switch (next_rand(s) % 16) {
    case 0: snprintf(buf, n, "NULL"); break;
    case 1: snprintf(buf, n, "0"); break;
    case 2: snprintf(buf, n, "-1"); break;
    case 3: snprintf(buf, n, "9223372036854775807"); break;
    case 4: snprintf(buf, n, "-9223372036854775807 - 1"); break;
    case 5: snprintf(buf, n, "%s + 1", c); break;
    case 6: snprintf(buf, n, "-%s", c); break;
    case 7: snprintf(buf, n, "'x''\"<&>\n'"); break;
    case 8: snprintf(buf, n, "printf('%%.*c', %u, 'z')", 1000 + next_rand(s) % 200000); break;
    case 9: snprintf(buf, n, "x'00ff'"); break;
    case 10: snprintf(buf, n, "'[%u,-1,9223372036854775807'", next_rand(s) % 9); break;
    case 11: snprintf(buf, n, "1e308"); break;
    default: snprintf(buf, n, "%u", next_rand(s) % 200); break; /* likely an id */
    }
}

static size_t sql_mutate(uint8_t *data, size_t size, size_t max_size, unsigned seed)
{
    size_t out = 0;
    sqlite3 *db = NULL;
    unsigned char *copy = sqlite3_malloc64(size);
    if (!copy || sqlite3_open(":memory:", &db) != SQLITE_OK)
        goto out;
    memcpy(copy, data, size);
    if (sqlite3_deserialize(db, "main", copy, size, size,
                            SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE)
        != SQLITE_OK) {
        copy = NULL; /* freed by sqlite3_deserialize on failure */
        goto out;
    }
    copy = NULL;
    unsigned s = seed;
    int changed = 0, n = 1 + (int)(next_rand(&s) % 3);
    for (int k = 0; k < n; k++) {
        size_t t = next_rand(&s) % (sizeof targets / sizeof targets[0]);
        const char *tb = targets[t].table, *c = targets[t].column;
        unsigned off = next_rand(&s) % 40;
        char val[96], sql[512];
        unsigned what = next_rand(&s) % 10;
        if (what == 0) {
            snprintf(sql, sizeof sql, "DELETE FROM %s WHERE %s IS (SELECT %s FROM %s "
                     "LIMIT 1 OFFSET %u)", tb, c, c, tb, off);
        } else if (what == 1) {
            snprintf(sql, sizeof sql, "INSERT OR IGNORE INTO %s SELECT * FROM %s "
                     "LIMIT 1 OFFSET %u", tb, tb, off);
        } else {
            pick_value(&s, c, val, sizeof val);
            snprintf(sql, sizeof sql, "UPDATE OR IGNORE %s SET %s = %s WHERE %s IS "
                     "(SELECT %s FROM %s LIMIT 1 OFFSET %u)%s", tb, c, val, c, c, tb, off,
                     what == 2 ? " OR 1" : "");
        }
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK && sqlite3_changes(db) > 0)
            changed = 1;
    }
    if (!changed)
        goto out;
    sqlite3_int64 sz = 0;
    unsigned char *img = sqlite3_serialize(db, "main", &sz, 0);
    if (img && sz > 0 && (size_t)sz <= max_size) {
        memcpy(data, img, (size_t)sz);
        out = (size_t)sz;
    }
    sqlite3_free(img);
out:
    sqlite3_free(copy);
    sqlite3_close(db);
    return out;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed)
{
    if (seed % 2 == 0 && size >= 512) {
        size_t n = sql_mutate(data, size, max_size, seed);
        if (n)
            return n;
    }
    return LLVMFuzzerMutate(data, size, max_size);
}

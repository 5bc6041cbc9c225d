/*
 * bench_rows: what one trace row costs the writer, for the row mix the
 * engine adapter writes, beside a plain SQLite insert loop (the anchor)
 * measured in the same run, in interleaved rounds.
 *
 * The mix is the one the engine adapter wrote for the MLP of
 * bench_overhead.py (per op: 1 op row, 2.9 op_args, 0.87 tensors, 0.39
 * storages, 0.3 version bumps, 0.17 nodes with 1.6 edges and an output
 * each, 0.18 saved tensors, 0.26 node executions, 0.15 names), in steps of
 * 61 ops, one backward call each. Modes: `file` (the whole run into the
 * trace, every row inserted as it comes), `log` (the whole run through the
 * row log, options.row_log, as the adapters record: rows appended to the
 * log during the run, inserted at close) and `keep2` (the flight recorder,
 * keep_last = 2). The anchor
 * inserts the same number of rows into one 5-integer table through one
 * prepared statement in one transaction, with the same pragmas.
 *
 * Prints `name: value unit` lines: rows, CPU ns per row (best of the
 * rounds) and the ratio to the anchor; close time on its own line. Never
 * fails: errors are printed as `error: ...` and the program exits 0.
 *
 * With --callgrind it runs one round of each and brackets each mode's
 * writing (close excluded) with callgrind client requests, dumping one
 * profile per mode ("rows:file", "rows:log", "rows:keep2", "rows:anchor", and
 * the closes of file and log, "rows:file_close", "rows:log_close"): run it under
 * valgrind --tool=callgrind --collect-atstart=no to count instructions per
 * row (bench_rows_ir.py does, when valgrind is installed).
 *
 * Usage: bench_rows [--callgrind] [steps] [rounds]   (default 1000 5)
 */
#include <gradtrace/recorder.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#endif
#endif
#ifndef CALLGRIND_TOGGLE_COLLECT
#define CALLGRIND_TOGGLE_COLLECT
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS_AT(s) ((void)(s))
#endif

#define OPS_PER_STEP 61

static int cg; /* --callgrind */

static void cg_begin(void)
{
    if (cg) {
        CALLGRIND_ZERO_STATS;
        CALLGRIND_TOGGLE_COLLECT;
    }
}

static void cg_end(const char *what)
{
    if (cg) {
        CALLGRIND_TOGGLE_COLLECT;
        CALLGRIND_DUMP_STATS_AT(what);
    }
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng_state;

static unsigned rng(unsigned n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % n);
}

struct result {
    double cpu;   /* writing, until the last flush */
    double close; /* close, CPU */
    long long rows;
};

/* Write `steps` steps of the engine's mix. */
static int run_recorder(const char *path, long steps, unsigned keep, int row_log,
                        struct result *res)
{
    gt_recorder *r = NULL;
    char err[256];
    gt_recorder_options o = {.overwrite = 1, .keep_last = keep, .row_log = row_log};
    if (gt_recorder_open(path, &o, err, sizeof(err), &r) != 0) {
        printf("error: %s\n", err);
        return -1;
    }
    static const char *names[6] = {"aten::addmm", "aten::relu",        "aten::t",
                                   "aten::mm",    "aten::add_.Tensor", "aten::sum"};
    gt_id thread = 0, name[6], slot = 0, dev = 0, dt = 0, node_name = 0, api = 0;
    int rc = gt_intern_thread(r, 1000, "MainThread", &thread);
    for (int i = 0; i < 6 && rc == 0; i++)
        rc = gt_intern_string(r, names[i], strlen(names[i]), &name[i]);
    if (rc == 0)
        rc = gt_intern_string(r, "self", 4, &slot);
    if (rc == 0)
        rc = gt_intern_string(r, "cpu", 3, &dev);
    if (rc == 0)
        rc = gt_intern_string(r, "float32", 7, &dt);
    if (rc == 0)
        rc = gt_intern_string(r, "AddmmBackward0", 14, &node_name);
    if (rc == 0)
        rc = gt_intern_string(r, "Tensor.backward", 15, &api);
    rng_state = 88172645463325252ULL;
    long long rows = 0;
    gt_id tensor = 0, storage = 0, node = 0;
    static const char *vars[4] = {"x", "h", "loss", "out"};
    const int64_t shape[2] = {32, 128}, strides[2] = {128, 1};
    cg_begin();
    double c0 = cpu_s();
    for (long s = 0; s < steps && rc == 0; s++) {
        gt_id bid = 0, step_node = node; /* edges stay within the step's graph */
        for (int i = 0; i < OPS_PER_STEP && rc == 0; i++) {
            int backward = i >= OPS_PER_STEP / 2;
            if (i == OPS_PER_STEP / 2) {
                gt_backward_info bi = {.api = api, .thread = thread};
                rc = gt_backward_begin(r, &bi, &bid);
            }
            gt_op_info op = {.name = name[rng(6)],
                             .phase = backward ? GT_PHASE_BACKWARD : GT_PHASE_FORWARD,
                             .grad_mode = !backward,
                             .thread = thread};
            int64_t seq = 0;
            if (rc == 0)
                rc = gt_op(r, &op, &seq);
            rows++;
            gt_id in0 = tensor > 3 ? tensor - rng(3) : 0;
            int nin = 1 + (rng(10) < 9);
            for (int k = 0; k < nin && in0 && rc == 0; k++, rows++)
                rc = gt_op_arg(r, seq, GT_ROLE_INPUT, k, in0 - k, 0);
            if (rng(100) < 87 && rc == 0) {
                if (rng(100) < 45 && rc == 0) {
                    rc = gt_storage(r, ++storage, 16384, dev);
                    rows++;
                }
                gt_tensor_info ti = {.id = ++tensor,
                                     .storage = storage ? storage : 0,
                                     .dtype = dt,
                                     .ndim = 2,
                                     .shape = shape,
                                     .strides = strides,
                                     .requires_grad = 1,
                                     .created_by = seq};
                if (rc == 0)
                    rc = gt_tensor(r, &ti);
                if (rc == 0)
                    rc = gt_op_arg(r, seq, GT_ROLE_OUTPUT, 0, tensor, 0);
                rows += 2;
            }
            if (rng(100) < 30 && in0 && rc == 0) {
                rc = gt_version_bump(r, seq, in0, 1 + s, 0, NULL);
                rows++;
            }
            if (!backward && rng(100) < 34 && rc == 0) {
                node++;
                gt_node_info ni = {.id = node,
                                   .name = node_name,
                                   .op = seq,
                                   .sequence_nr = node,
                                   .thread = thread};
                rc = gt_node(r, &ni);
                for (int e = 0; e < 1 + (rng(10) < 6) && rc == 0; e++, rows++)
                    rc = gt_edge(r, node, e, node - 1 > step_node ? node - 1 : 0, 0);
                if (rc == 0 && tensor)
                    rc = gt_node_output(r, node, 0, tensor);
                if (rc == 0 && rng(100) < 53)
                    rc = gt_saved_tensor(r, node, slot, in0, 0, 0, 16384, NULL);
                rows += 3;
            }
            if (backward && bid && node > step_node && rng(100) < 52 && rc == 0) {
                rc = gt_node_exec(r, bid, node - rng((unsigned)(node - step_node)));
                rows++;
            }
            if (rng(100) < 15 && tensor && rc == 0) {
                rc = gt_name(r, seq, tensor, vars[rng(4)]);
                rows++;
            }
        }
        if (bid && rc == 0)
            rc = gt_backward_end(r, bid, 1);
    }
    if (rc == 0)
        rc = gt_recorder_flush(r);
    double c1 = cpu_s();
    cg_end(keep ? "rows:keep2" : row_log ? "rows:log" : "rows:file");
    if (rc != 0)
        printf("error: %s\n", gt_recorder_errmsg(r));
    cg_begin();
    gt_run_end(r, GT_RUN_OK, 0, 0);
    int crc = gt_recorder_close(r);
    double c2 = cpu_s();
    cg_end(keep ? "rows:keep2_close" : row_log ? "rows:log_close" : "rows:file_close");
    if (crc != 0) {
        printf("error: close: %s\n", gt_strerror(crc));
        rc = crc;
    }
    res->cpu = c1 - c0;
    res->close = c2 - c1;
    res->rows = rows;
    return rc == 0 ? 0 : -1;
}

static int run_anchor(const char *path, long long rows, double *cpu)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    unlink(path);
    int rc = sqlite3_open(path, &db);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db,
                          "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
                          " CREATE TABLE t (a INTEGER PRIMARY KEY, b INTEGER,"
                          " c INTEGER, d INTEGER, e INTEGER)",
                          NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "INSERT INTO t VALUES (?1, ?2, ?3, ?4, ?5)", -1, &st,
                                NULL);
    cg_begin();
    double c0 = cpu_s();
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    for (long long i = 1; i <= rows && rc == SQLITE_OK; i++) {
        sqlite3_bind_int64(st, 1, i);
        sqlite3_bind_int64(st, 2, i & 7);
        sqlite3_bind_int(st, 3, 0);
        sqlite3_bind_int64(st, 4, i * 2);
        sqlite3_bind_int64(st, 5, 1);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? sqlite3_reset(st) : rc;
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    *cpu = cpu_s() - c0;
    cg_end("rows:anchor");
    if (rc != SQLITE_OK)
        printf("error: anchor: %s\n", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_close(db);
    unlink(path);
    return rc == SQLITE_OK ? 0 : -1;
}

static void keep_best(double *best, double v)
{
    if (*best == 0 || v < *best)
        *best = v;
}

int main(int argc, char **argv)
{
    int a = 1;
    if (a < argc && !strcmp(argv[a], "--callgrind")) {
        cg = 1;
        a++;
    }
    long steps = a < argc ? atol(argv[a]) : 1000;
    int rounds = a + 1 < argc ? atoi(argv[a + 1]) : 5;
    if (steps <= 0)
        steps = 1000;
    if (rounds <= 0 || cg)
        rounds = cg ? 1 : 5;
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    char trace[512], anchor[512];
    snprintf(trace, sizeof(trace), "%s/bench_rows_%ld.db", dir, (long)getpid());
    snprintf(anchor, sizeof(anchor), "%s/bench_rows_anchor_%ld.db", dir, (long)getpid());
    double file = 0, keep = 0, anc = 0, close_file = 0, close_keep = 0, logw = 0,
           close_log = 0;
    struct result rf = {0}, rk = {0}, rl = {0};
    for (int round = 0; round < rounds; round++) {
        double acpu = 0;
        if (run_recorder(trace, steps, 0, 0, &rf) != 0 ||
            run_recorder(trace, steps, 0, 1, &rl) != 0 ||
            run_recorder(trace, steps, 2, 0, &rk) != 0 ||
            run_anchor(anchor, rf.rows, &acpu) != 0) {
            unlink(trace);
            return 0;
        }
        keep_best(&file, rf.cpu);
        keep_best(&keep, rk.cpu);
        keep_best(&logw, rl.cpu);
        keep_best(&close_log, rl.close);
        keep_best(&anc, acpu);
        keep_best(&close_file, rf.close);
        keep_best(&close_keep, rk.close);
    }
    unlink(trace);
    double n = (double)rf.rows;
    printf("rows_per_run: %lld rows (%ld steps of %d ops)\n", rf.rows, steps,
           OPS_PER_STEP);
    printf("rows_file_ns_per_row: %.0f ns\n", 1e9 * file / n);
    printf("rows_log_ns_per_row: %.0f ns\n", 1e9 * logw / n);
    printf("rows_keep2_ns_per_row: %.0f ns\n", 1e9 * keep / n);
    printf("rows_anchor_ns_per_row: %.0f ns\n", 1e9 * anc / n);
    printf("rows_file_vs_anchor: %.2f x\n", file / anc);
    printf("rows_log_vs_anchor: %.2f x\n", logw / anc);
    printf("rows_keep2_vs_anchor: %.2f x\n", keep / anc);
    printf("rows_file_close: %.1f ms\n", 1e3 * close_file);
    printf("rows_log_close: %.1f ms\n", 1e3 * close_log);
    printf("rows_keep2_close: %.1f ms\n", 1e3 * close_keep);
    return 0;
}

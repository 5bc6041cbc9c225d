/*
 * bench_writer: how fast the recorder writes a realistic event mix, and how
 * big the closed trace is, beside a plain SQLite insert loop (the anchor)
 * measured in the same run, in interleaved rounds.
 *
 * The mix, per op: 1 op row, 3 op_args rows, 0.3 version bumps, 0.5 saved
 * tensors; its Python stack (depth 20, drawn from 500 distinct frames, 200
 * distinct call paths) is interned level by level as the adapter does.
 * An "event" is one row of the mix (4.8 per op); stack interning is
 * included in the time but not counted as events.
 *
 * The anchor inserts the same number of rows into one 5-integer table
 * through one prepared statement in one transaction, with the same pragmas
 * (WAL, synchronous=NORMAL).
 *
 * Rates are best-of-rounds, from wall time and (the *_cpu_s lines) from
 * process CPU time, which other load on the machine disturbs less.
 *
 * Prints `name: value unit` lines. Never fails: errors are printed as
 * `error: ...` and the program still exits 0.
 *
 * Usage: bench_writer [ops-per-round] [rounds]   (default 200000 3)
 */
#include <gradtrace/recorder.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEPTH   20
#define NFRAMES 500
#define NPATHS  200

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU time of this process (user + system): less disturbed than wall time
 * when other work shares the machine. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng_state = 88172645463325252ULL;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* paths[p][d]: frame index (0..NFRAMES) at depth d of call path p. Paths
 * share prefixes as real programs do: the outer 10 levels come from 20
 * distinct "drivers". */
static int paths[NPATHS][DEPTH];

static void make_paths(void)
{
    int drivers[20][DEPTH / 2];
    for (int i = 0; i < 20; i++)
        for (int d = 0; d < DEPTH / 2; d++)
            drivers[i][d] = (int)(rng() % NFRAMES);
    for (int p = 0; p < NPATHS; p++) {
        int drv = (int)(rng() % 20);
        for (int d = 0; d < DEPTH; d++)
            paths[p][d] = d < DEPTH / 2 ? drivers[drv][d] : (int)(rng() % NFRAMES);
    }
}

struct result {
    double seconds;       /* events until flush */
    double cpu_seconds;   /* the same, CPU time */
    double close_seconds; /* close: indexes + checkpoint */
    long long events;
    long long file_bytes;
};

static long long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

static int run_recorder(const char *path, long ops, struct result *res)
{
    gt_recorder *r = NULL;
    char err[256];
    gt_recorder_options o = {.overwrite = 1};
    if (gt_recorder_open(path, &o, err, sizeof(err), &r) != 0) {
        printf("error: %s\n", err);
        return -1;
    }
    double t0 = now_s(), c0 = cpu_s();
    gt_id thread, names[8], slot, frames[NFRAMES];
    static const char *opnames[8] = {
        "aten::mul.Tensor", "aten::add.Tensor", "aten::mul_.Tensor", "aten::relu",
        "aten::mm",         "aten::sum",        "aten::view",        "aten::addmm"};
    int rc = gt_intern_thread(r, 1000, "MainThread", &thread);
    for (int i = 0; i < 8 && rc == 0; i++)
        rc = gt_intern_string(r, opnames[i], strlen(opnames[i]), &names[i]);
    if (rc == 0)
        rc = gt_intern_string(r, "self", 4, &slot);
    for (int i = 0; i < NFRAMES && rc == 0; i++) {
        char file[64], fn[32], code[64];
        snprintf(file, sizeof(file), "/home/user/project/module%d.py", i % 37);
        snprintf(fn, sizeof(fn), "function_%d", i);
        snprintf(code, sizeof(code), "x = layer_%d(x) + residual", i);
        rc = gt_intern_frame(r, file, 10 + i, fn, code, &frames[i]);
    }
    long long events = 0;
    int64_t tensor = 1;
    for (long i = 0; i < ops && rc == 0; i++) {
        const int *path_frames = paths[rng() % NPATHS];
        gt_id stack = 0;
        for (int d = 0; d < DEPTH && rc == 0; d++) {
            gt_id f = frames[path_frames[d]];
            rc = gt_intern_stack(r, stack, f, f, &stack);
        }
        gt_op_info op = {.name = names[i & 7],
                         .phase = GT_PHASE_FORWARD,
                         .grad_mode = 1,
                         .thread = thread,
                         .stack = stack};
        int64_t seq = 0;
        if (rc == 0)
            rc = gt_op(r, &op, &seq);
        if (rc == 0)
            rc = gt_op_arg(r, seq, GT_ROLE_INPUT, 0, tensor, 0);
        if (rc == 0)
            rc = gt_op_arg(r, seq, GT_ROLE_INPUT, 1, tensor + 1, 2);
        if (rc == 0)
            rc = gt_op_arg(r, seq, GT_ROLE_OUTPUT, 0, tensor + 2, 0);
        events += 4;
        if (rc == 0 && i % 10 < 3) {
            rc = gt_version_bump(r, seq, tensor, 1, 0, NULL);
            events++;
        }
        if (rc == 0 && i % 2 == 0) {
            rc = gt_saved_tensor(r, i + 1, slot, tensor, 0, 0, 4096, NULL);
            events++;
        }
        tensor += 2;
    }
    if (rc == 0)
        rc = gt_recorder_flush(r);
    double t1 = now_s(), c1 = cpu_s();
    if (rc != 0)
        printf("error: %s\n", gt_recorder_errmsg(r));
    gt_run_end(r, GT_RUN_OK, 0, 0);
    int crc = gt_recorder_close(r);
    double t2 = now_s();
    if (crc != 0) {
        printf("error: close: %s\n", gt_strerror(crc));
        rc = crc;
    }
    res->seconds = t1 - t0;
    res->cpu_seconds = c1 - c0;
    res->close_seconds = t2 - t1;
    res->events = events;
    res->file_bytes = file_size(path);
    return rc == 0 ? 0 : -1;
}

static int run_anchor(const char *path, long long rows, double *seconds, double *cpu)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc;
    unlink(path);
    rc = sqlite3_open(path, &db);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db,
                          "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
                          " CREATE TABLE t (a INTEGER PRIMARY KEY, b INTEGER,"
                          " c INTEGER, d INTEGER, e INTEGER)",
                          NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "INSERT INTO t VALUES (?1, ?2, ?3, ?4, ?5)", -1, &st,
                                NULL);
    double t0 = now_s(), c0 = cpu_s();
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    for (long long i = 1; i <= rows && rc == SQLITE_OK; i++) {
        sqlite3_bind_int64(st, 1, i);
        sqlite3_bind_int64(st, 2, i & 7);
        sqlite3_bind_int(st, 3, 0);
        sqlite3_bind_int64(st, 4, i * 2);
        sqlite3_bind_int64(st, 5, 1);
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
        sqlite3_reset(st);
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    *seconds = now_s() - t0;
    *cpu = cpu_s() - c0;
    if (rc != SQLITE_OK)
        printf("error: anchor: %s\n", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_close(db);
    unlink(path);
    return rc == SQLITE_OK ? 0 : -1;
}

/* bytes per op of each table and index of the closed trace (dbstat). */
static void table_sizes(const char *path, long ops)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT name, sum(pgsize), sum(payload), sum(unused)"
                           " FROM dbstat GROUP BY name ORDER BY 2 DESC",
                           -1, &st, NULL) != SQLITE_OK) {
        printf("note: no dbstat: %s\n", sqlite3_errmsg(db));
        sqlite3_close(db);
        return;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        double b = (double)sqlite3_column_int64(st, 1) / (double)ops;
        if (b < 0.5)
            continue;
        printf("bytes_per_op.%s: %.1f bytes (payload %.1f, unused %.1f)\n",
               (const char *)sqlite3_column_text(st, 0), b,
               (double)sqlite3_column_int64(st, 2) / (double)ops,
               (double)sqlite3_column_int64(st, 3) / (double)ops);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
}

int main(int argc, char **argv)
{
    long ops = argc > 1 ? atol(argv[1]) : 200000;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (ops <= 0)
        ops = 200000;
    if (rounds <= 0)
        rounds = 3;
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    char trace[512], anchor[512];
    snprintf(trace, sizeof(trace), "%s/bench_writer_%ld.db", dir, (long)getpid());
    snprintf(anchor, sizeof(anchor), "%s/bench_anchor_%ld.db", dir, (long)getpid());
    make_paths();

    double best_rec = 0, best_anchor = 0, best_close = 0, best_rec_cpu = 0,
           best_anchor_cpu = 0;
    struct result res = {0};
    int ok = 1;
    for (int round = 0; round < rounds && ok; round++) {
        double a = 0, acpu = 0;
        if (run_recorder(trace, ops, &res) != 0) {
            ok = 0;
            break;
        }
        if (run_anchor(anchor, res.events, &a, &acpu) != 0) {
            ok = 0;
            break;
        }
        if (best_rec == 0 || res.seconds < best_rec)
            best_rec = res.seconds;
        if (best_close == 0 || res.close_seconds < best_close)
            best_close = res.close_seconds;
        if (best_anchor == 0 || a < best_anchor)
            best_anchor = a;
        if (best_rec_cpu == 0 || res.cpu_seconds < best_rec_cpu)
            best_rec_cpu = res.cpu_seconds;
        if (best_anchor_cpu == 0 || acpu < best_anchor_cpu)
            best_anchor_cpu = acpu;
        printf("round_%d: recorder %.0f events/s, anchor %.0f rows/s\n", round + 1,
               (double)res.events / res.seconds, (double)res.events / a);
    }
    if (ok) {
        double rec_eps = (double)res.events / best_rec;
        double anc_eps = (double)res.events / best_anchor;
        printf("ops_per_round: %ld ops\n", ops);
        printf("events_per_round: %lld events\n", res.events);
        printf("recorder_events_per_s: %.0f events/s\n", rec_eps);
        printf("recorder_events_per_s_with_close: %.0f events/s\n",
               (double)res.events / (best_rec + best_close));
        printf("anchor_rows_per_s: %.0f rows/s\n", anc_eps);
        printf("ratio_anchor_over_recorder: %.2f x\n", anc_eps / rec_eps);
        printf("recorder_events_per_cpu_s: %.0f events/s\n",
               (double)res.events / best_rec_cpu);
        printf("anchor_rows_per_cpu_s: %.0f rows/s\n",
               (double)res.events / best_anchor_cpu);
        printf("ratio_cpu_anchor_over_recorder: %.2f x\n",
               best_rec_cpu / best_anchor_cpu);
        printf("close_seconds: %.3f s\n", best_close);
        printf("trace_bytes: %lld bytes\n", res.file_bytes);
        printf("bytes_per_op: %.1f bytes\n", (double)res.file_bytes / (double)ops);
        table_sizes(trace, ops);
    }
    unlink(trace);
    return 0;
}

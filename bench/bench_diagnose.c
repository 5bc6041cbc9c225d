/*
 * bench_diagnose: how long `gt_diagnose` takes on a synthetic 1,000,000-op
 * trace, and how much memory it needs, beside an anchor measured in the same
 * run: a plain `SELECT count(*) FROM ops` over the same file.
 *
 * The trace (written with the recorder API, as the adapter would) is a
 * training run of STEPS steps. Each step: a forward of GRAPH ops, each one
 * node (edges to the previous node and to a parameter's AccumulateGrad),
 * saving its input and its parameter; FILLER ops outside the graph (no-grad
 * bookkeeping that reads and writes scratch buffers, every 4th one making a
 * tensor); one backward; an optimizer step bumping every parameter. In the
 * last step one activation is changed in place before the backward: the
 * diagnosis must find exactly that one.
 *
 * To show that memory does not grow with the ops outside the replayed
 * graphs, a second trace with the same graphs and a tenth of the filler is
 * diagnosed too. Each diagnosis runs in a fresh process (this program run
 * again), so its peak RSS (getrusage) is its own.
 *
 * Prints `name: value unit` lines. Never fails the build: errors are printed
 * as `error: ...` and the program exits 0.
 *
 * Usage: bench_diagnose [total-ops] [steps] [graph-ops]
 *        (default 1000000 100 500)
 */
#include <gradtrace/recorder.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gradtrace/diagnose.h>
#include <gradtrace/trace.h>

#include "bench.h"

#define NPARAMS  8
#define NSCRATCH 64

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

typedef struct gen {
    gt_recorder *r;
    gt_id thread, f32, cpu, opn[8], slot_self, slot_other, acc, nodename, api;
    gt_id stack_fwd, stack_fill, stack_opt, stack_bw, stack_bug;
    int64_t next_tensor, next_storage, next_node;
    int64_t param[NPARAMS], param_version[NPARAMS], param_acc[NPARAMS];
    int64_t scratch[NSCRATCH], scratch_version[NSCRATCH];
    long long ops;
} gen;

#define TRY(x)                                                                           \
    do {                                                                                 \
        if ((rc = (x)) != 0)                                                             \
            goto out;                                                                    \
    } while (0)

static int new_tensor(gen *g, int64_t n, int rg, int leaf, int64_t created_by,
                      int64_t *id)
{
    int64_t shape[2] = {n / 8 ? n / 8 : 1, 8}, strides[2] = {8, 1};
    int rc;
    int64_t storage = g->next_storage++;
    if ((rc = gt_storage(g->r, storage, n * 4, g->cpu)) != 0)
        return rc;
    gt_tensor_info t = {.id = g->next_tensor++,
                        .storage = storage,
                        .dtype = g->f32,
                        .ndim = 2,
                        .shape = shape,
                        .strides = strides,
                        .requires_grad = rg,
                        .is_leaf = leaf,
                        .created_by = created_by};
    if ((rc = gt_tensor(g->r, &t)) != 0)
        return rc;
    *id = t.id;
    return 0;
}

static int stack_for(gen *g, int line, const char *code, gt_id *out)
{
    gt_id f;
    int rc = gt_intern_frame(g->r, "/bench/train.py", line, "train_step", code, &f);
    return rc ? rc : gt_intern_stack(g->r, 0, f, f, out);
}

static int setup(gen *g)
{
    static const char *names[8] = {"aten::addmm",
                                   "aten::relu",
                                   "aten::mul.Tensor",
                                   "aten::add_.Tensor",
                                   "aten::_foreach_add_.List",
                                   "aten::sum",
                                   "aten::mul_.Tensor",
                                   "aten::copy_"};
    int rc = 0;
    g->next_tensor = g->next_storage = g->next_node = 1;
    TRY(gt_intern_thread(g->r, 1, "MainThread", &g->thread));
    TRY(gt_intern_string(g->r, "float32", 7, &g->f32));
    TRY(gt_intern_string(g->r, "cpu", 3, &g->cpu));
    for (int i = 0; i < 8; i++)
        TRY(gt_intern_string(g->r, names[i], strlen(names[i]), &g->opn[i]));
    TRY(gt_intern_string(g->r, "self", 4, &g->slot_self));
    TRY(gt_intern_string(g->r, "mat2", 4, &g->slot_other));
    TRY(gt_intern_string(g->r, "torch::autograd::AccumulateGrad", 31, &g->acc));
    TRY(gt_intern_string(g->r, "AddmmBackward0", 14, &g->nodename));
    TRY(gt_intern_string(g->r, "Tensor.backward", 15, &g->api));
    TRY(stack_for(g, 20, "h = layer(h)", &g->stack_fwd));
    TRY(stack_for(g, 30, "stats.update(h)", &g->stack_fill));
    TRY(stack_for(g, 40, "optimizer.step()", &g->stack_opt));
    TRY(stack_for(g, 35, "loss.backward()", &g->stack_bw));
    TRY(stack_for(g, 25, "h.mul_(0.5)", &g->stack_bug));
    for (int p = 0; p < NPARAMS; p++) {
        TRY(new_tensor(g, 64, 1, 1, 0, &g->param[p]));
        gt_node_info n = {.id = g->next_node++,
                          .name = g->acc,
                          .sequence_nr = -1,
                          .thread = g->thread,
                          .variable = g->param[p]};
        TRY(gt_node(g->r, &n));
        g->param_acc[p] = n.id;
    }
    for (int s = 0; s < NSCRATCH; s++)
        TRY(new_tensor(g, 64, 0, 1, 0, &g->scratch[s]));
out:
    return rc;
}

static int op(gen *g, int name, int phase, gt_id stack, int64_t *seq)
{
    gt_op_info o = {.name = g->opn[name],
                    .phase = phase,
                    .grad_mode = phase == 0,
                    .thread = g->thread,
                    .stack = stack};
    g->ops++;
    return gt_op(g->r, &o, seq);
}

static int filler(gen *g, long n)
{
    int rc = 0;
    for (long i = 0; i < n; i++) {
        int64_t seq, out;
        int a = (int)(g->ops % NSCRATCH), b = (int)((g->ops * 7 + 3) % NSCRATCH);
        TRY(op(g, 2 + (int)(i & 1), GT_PHASE_OTHER, g->stack_fill, &seq));
        TRY(gt_op_arg(g->r, seq, GT_ROLE_INPUT, 0, g->scratch[a], g->scratch_version[a]));
        TRY(gt_op_arg(g->r, seq, GT_ROLE_MUTATED, 0, g->scratch[b],
                      g->scratch_version[b]));
        TRY(gt_version_bump(g->r, seq, g->scratch[b], ++g->scratch_version[b], 0, NULL));
        if (i % 4 == 0) {
            TRY(new_tensor(g, 64, 0, 0, seq, &out));
            TRY(gt_op_arg(g->r, seq, GT_ROLE_OUTPUT, 0, out, 0));
        }
    }
out:
    return rc;
}

static int step(gen *g, long graph, long fill, int bug)
{
    int rc = 0;
    int64_t h, prev_node = 0, seq, last = 0;
    TRY(new_tensor(g, 512, 0, 1, 0, &h)); /* the batch */
    for (long k = 0; k < graph; k++) {
        int p = (int)(k % NPARAMS);
        int64_t out;
        TRY(op(g, 0, GT_PHASE_FORWARD, g->stack_fwd, &seq));
        TRY(gt_op_arg(g->r, seq, GT_ROLE_INPUT, 0, h, 0));
        TRY(gt_op_arg(g->r, seq, GT_ROLE_INPUT, 1, g->param[p], g->param_version[p]));
        TRY(new_tensor(g, 512, 1, 0, seq, &out));
        TRY(gt_op_arg(g->r, seq, GT_ROLE_OUTPUT, 0, out, 0));
        gt_node_info n = {.id = g->next_node++,
                          .name = g->nodename,
                          .op = seq,
                          .sequence_nr = g->next_node,
                          .thread = g->thread};
        TRY(gt_node(g->r, &n));
        TRY(gt_edge(g->r, n.id, 0, prev_node, 0));
        TRY(gt_edge(g->r, n.id, 1, g->param_acc[p], 0));
        TRY(gt_node_output(g->r, n.id, 0, out));
        TRY(gt_saved_tensor(g->r, n.id, g->slot_self, h, 0, 0, 2048, NULL));
        TRY(gt_saved_tensor(g->r, n.id, g->slot_other, g->param[p], g->param_version[p],
                            0, 256, NULL));
        if (bug && k == graph / 2) {
            int64_t s2;
            TRY(op(g, 6, GT_PHASE_FORWARD, g->stack_bug, &s2));
            TRY(gt_op_arg(g->r, s2, GT_ROLE_MUTATED, 0, h, 0));
            TRY(gt_version_bump(g->r, s2, h, 1, 0, NULL));
        }
        prev_node = n.id;
        last = n.id;
        h = out;
    }
    TRY(filler(g, fill));
    gt_backward_info bi = {.api = g->api, .thread = g->thread, .stack = g->stack_bw};
    gt_id bw;
    TRY(gt_backward_begin(g->r, &bi, &bw));
    TRY(gt_backward_root(g->r, bw, 0, h, last));
    TRY(gt_backward_end(g->r, bw, 1));
    for (int p = 0; p < NPARAMS; p++) {
        TRY(op(g, 4, GT_PHASE_OTHER, g->stack_opt, &seq));
        TRY(gt_op_arg(g->r, seq, GT_ROLE_MUTATED, 0, g->param[p], g->param_version[p]));
        TRY(gt_version_bump(g->r, seq, g->param[p], ++g->param_version[p], 0, NULL));
    }
out:
    return rc;
}

static int generate(const char *path, long total, long steps, long graph, long long *ops)
{
    gen g;
    char err[256];
    gt_recorder_options o = {.overwrite = 1};
    memset(&g, 0, sizeof g);
    int rc = gt_recorder_open(path, &o, err, sizeof err, &g.r);
    if (rc) {
        printf("error: %s\n", err);
        return rc;
    }
    long fill = total / steps - graph - NPARAMS - 1;
    if (fill < 0)
        fill = 0;
    TRY(setup(&g));
    for (long s = 0; s < steps; s++)
        TRY(step(&g, graph, fill, s == steps - 1));
    TRY(gt_run_end(g.r, GT_RUN_OK, 0, 0));
out:
    if (rc)
        printf("error: generating %s: %s\n", path, gt_recorder_errmsg(g.r));
    int crc = gt_recorder_close(g.r);
    *ops = g.ops;
    return rc ? rc : crc;
}

/* In a fresh process (this program run again with --measure, so that its
 * peak RSS is the diagnosis's own, not the generator's): the anchor, then
 * diagnose (all calls, then the last one); prints the figures with
 * `prefix`. */
static void measure_here(const char *path, const char *prefix, long steps,
                         long graph_nodes);

static void measure(const char *self, const char *path, const char *prefix, long steps,
                    long graph_nodes)
{
    char s[32], g[32];
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        printf("error: fork failed\n");
        return;
    }
    if (pid > 0) {
        int status;
        waitpid(pid, &status, 0);
        return;
    }
    snprintf(s, sizeof s, "%ld", steps);
    snprintf(g, sizeof g, "%ld", graph_nodes);
    execl(self, self, "--measure", path, prefix, s, g, (char *)NULL);
    printf("error: cannot run %s again\n", self);
    _exit(0);
}

static void measure_here(const char *path, const char *prefix, long steps,
                         long graph_nodes)
{
    gt_trace *t;
    gt_findings *f = NULL;
    if (gt_trace_open(path, &t) != 0) {
        printf("error: %s\n", gt_trace_errmsg(t));
        exit(0);
    }
    sqlite3_stmt *st;
    double t0 = now_s();
    long long nops = -1;
    if (sqlite3_prepare_v2(gt_trace_db(t), "SELECT count(*) FROM ops", -1, &st, NULL) ==
            SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        nops = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    double anchor = now_s() - t0;

    gt_diagnose_options all = {0}, last = {.backward = steps};
    t0 = now_s();
    double c0 = cpu_s();
    if (gt_diagnose(t, &all, &f) != 0) {
        printf("error: diagnose: %s\n", gt_trace_errmsg(t));
        exit(0);
    }
    double dall = now_s() - t0, call = cpu_s() - c0;
    size_t nfind = f->n;
    int right = f->n == 1 && f->v[0].kind == GT_FINDING_INPLACE_INVALIDATED_SAVED &&
                f->v[0].backward == steps && f->v[0].version_at_backward == 1;
    gt_findings_free(f);
    t0 = now_s();
    if (gt_diagnose(t, &last, &f) != 0) {
        printf("error: diagnose: %s\n", gt_trace_errmsg(t));
        exit(0);
    }
    double dlast = now_s() - t0;
    gt_findings_free(f);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%s_ops: %lld ops\n", prefix, nops);
    printf("%s_anchor_select_count_ops: %.1f ms\n", prefix, anchor * 1e3);
    printf("%s_diagnose_all_%ld_backward_calls: %.1f ms\n", prefix, steps, dall * 1e3);
    printf("%s_diagnose_all_cpu: %.1f ms\n", prefix, call * 1e3);
    printf("%s_diagnose_all_per_graph_node: %.1f us\n", prefix,
           call * 1e6 / (double)(steps * graph_nodes));
    printf("%s_diagnose_last_backward_call: %.1f ms\n", prefix, dlast * 1e3);
    printf("%s_diagnose_all_over_anchor: %.2f x\n", prefix,
           anchor > 0 ? dall / anchor : 0);
    printf("%s_findings: %zu (expected 1, %s)\n", prefix, nfind,
           right ? "correct" : "WRONG");
    printf("%s_peak_rss: %ld kB\n", prefix, ru.ru_maxrss);
    gt_trace_close(t);
    fflush(stdout);
    exit(0);
}

static long long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "--measure")) {
        measure_here(argv[2], argv[3], atol(argv[4]), atol(argv[5]));
        return 0;
    }
    long total = argc > 1 ? atol(argv[1]) : 1000000;
    long steps = argc > 2 ? atol(argv[2]) : 100;
    long graph = argc > 3 ? atol(argv[3]) : 500;
    char big[256], small[256];
    long long ops;
    if (total <= 0 || steps <= 0 || graph <= 0) {
        printf("error: usage: bench_diagnose [total-ops] [steps] [graph-ops]\n");
        return 0;
    }
    snprintf(big, sizeof big, "/tmp/bench_diagnose_%d_big.db", (int)getpid());
    snprintf(small, sizeof small, "/tmp/bench_diagnose_%d_small.db", (int)getpid());

    double t0 = now_s();
    if (generate(big, total, steps, graph, &ops) != 0)
        return 0;
    printf("generate_trace: %.2f s (%lld ops, %ld steps, %ld graph nodes per step, %lld "
           "bytes)\n",
           now_s() - t0, ops, steps, graph, file_size(big));
    measure(argv[0], big, "big", steps, graph);

    long small_total = steps * (graph + NPARAMS + 1) + (total - steps * graph) / 10;
    if (generate(small, small_total, steps, graph, &ops) == 0) {
        printf("generate_small_trace: %lld ops (same graphs, a tenth of the filler)\n",
               ops);
        measure(argv[0], small, "small", steps, graph);
    }
    if (!getenv("GT_BENCH_KEEP")) {
        unlink(big);
        unlink(small);
    }
    return 0;
}

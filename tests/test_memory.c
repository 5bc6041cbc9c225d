/*
 * Tests for the memory a backward call holds (inspector/memory.c) and
 * `gradtrace memory` (cli/cmd_memory.c), on traces written through the
 * recorder API: a storage saved through two views and by two nodes counted
 * once, module paths from parameter names and callers' lines, what
 * checkpointing a module frees, several backward calls (the largest
 * chosen, freed graphs left out), JSON, graph --bytes, a trace without
 * backward calls, and files that are no trace.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>

#include <gradtrace/format.h>

#include "cmd.h"
#include <gradtrace/memory.h>
#include "captured.h"
#include <gradtrace/trace.h>

#define TB_PATH_PREFIX "gt_test_memory"
#define TB_SOURCE_FILE "/src/model.py"
#include "tracebuilder.h"

/* ---- building traces ----------------------------------------------------- */

/* A float32 tensor of n elements (n * 4 bytes) on `storage`. */
static void tensor(tb *b, gt_id id, gt_id storage, int64_t n, int64_t made_by, int leaf,
                   int rg, gt_id alias_of)
{
    tb_tensor_1d(b,
                 (gt_tensor_info){.id = id,
                                  .storage = storage,
                                  .requires_grad = rg,
                                  .is_leaf = leaf,
                                  .created_by = made_by,
                                  .alias_of = alias_of,
                                  .shares_version = alias_of != 0,
                                  .version_counter = alias_of},
                 n);
}

static void storage(tb *b, gt_id id, int64_t nbytes)
{
    assert_int_equal(gt_storage(b->r, id, nbytes, b->cpu), 0);
}

static int64_t op(tb *b, const char *name, gt_id stack)
{
    return tb_op_at(b, name, GT_PHASE_FORWARD, stack);
}

static void node(tb *b, gt_id id, const char *name, int64_t op)
{
    tb_node_named(b, (gt_node_info){.id = id, .op = op}, name);
}

static void save(tb *b, gt_id node, const char *slot, gt_id tensor, int64_t nbytes)
{
    assert_int_equal(
        gt_saved_tensor(b->r, node, tb_str(b, slot), tensor, 0, 0, nbytes, NULL), 0);
}

static gt_id backward(tb *b, gt_id root, int retain)
{
    return tb_backward_from(b, "Tensor.backward", retain,
                            tb_stack(b, 90, "loss.backward()"), 1, &root);
}

static void close_trace(tb *b)
{
    tb_end(b, GT_RUN_OK, 0);
}

/* A stack frame `function` at line in /src/model.py (user code, or torch's
 * when engine), under parent. */
static gt_id frame(tb *b, gt_id parent, gt_id user, const char *function, int line,
                   const char *code, int engine, gt_id *frame_out)
{
    gt_id f, s;
    assert_int_equal(
        gt_intern_frame(b->r, engine ? "/torch/nn/modules/module.py" : TB_SOURCE_FILE,
                        line, function, code, &f),
        0);
    assert_int_equal(gt_intern_stack(b->r, parent, f, engine ? user : f, &s), 0);
    if (frame_out)
        *frame_out = f;
    return s;
}

/* Shared storages and views: tensor 1 on storage 10 (400 B) and its view
 * 2; tensor 3 on storage 11 (1000 B). MulBackward0 (node 100) saves 1 and
 * 3, ReluBackward0 (node 101, next of 100) saves the view 2, and one
 * saved tensor matched to no recorded tensor holds 24 bytes: 1424 bytes
 * on 3 storages, 4 saved tensors. */
static void build_shared(const char *name, char *path, size_t size)
{
    tb b;
    tb_open(&b, name);
    gt_id s = tb_stack(&b, 10, "y = x * w");
    storage(&b, 10, 400);
    storage(&b, 11, 1000);
    int64_t o1 = op(&b, "aten::relu", s);
    tensor(&b, 1, 10, 100, o1, 0, 1, 0);
    int64_t o2 = op(&b, "aten::view", s);
    tensor(&b, 2, 10, 50, o2, 0, 1, 1);
    node(&b, 101, "ReluBackward0", o1);
    save(&b, 101, "result", 2, 200);
    int64_t o3 = op(&b, "aten::mul", s);
    tensor(&b, 3, 11, 250, 0, 1, 0, 0);
    node(&b, 100, "MulBackward0", o3);
    save(&b, 100, "self", 1, 400);
    save(&b, 100, "other", 3, 1000);
    save(&b, 100, "unmatched", 0, 24);
    assert_int_equal(gt_edge(b.r, 100, 0, 101, 0), 0);
    gt_id bw = backward(&b, 100, 0);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    snprintf(path, size, "%s", b.path);
    close_trace(&b);
}

static gt_memory *measure(const char *path, int64_t call, int all)
{
    gt_trace *t = NULL;
    gt_memory *m = NULL;
    gt_memory_options o = {.backward = call, .all = all};
    assert_int_equal(gt_trace_open(path, &t), 0);
    int rc = gt_memory_measure(t, &o, &m);
    if (rc != 0)
        fail_msg("gt_memory_measure: %s", gt_trace_errmsg(t));
    gt_trace_close(t);
    return m;
}

static void memory_cmd(captured *c, const char *a1, const char *a2, const char *a3)
{
    char *argv[] = {"memory", (char *)a1, (char *)a2, (char *)a3, NULL};
    int argc = 2 + (a2 != NULL) + (a3 != NULL);
    run_captured(gt_cmd_memory, argc, argv, NULL, c);
}

/* The value of JSON path `p` in document `doc`, as text, through SQLite. */
static char *json_at(const char *doc, const char *p)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT json_extract(?1, ?2)", -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(st, 1, doc, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, p, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const char *v = (const char *)sqlite3_column_text(st, 0);
    char *r = strdup(v ? v : "NULL");
    sqlite3_finalize(st);
    sqlite3_close(db);
    return r;
}

#define assert_json(doc, path, want)                                                     \
    do {                                                                                 \
        char *v_ = json_at(doc, path);                                                   \
        if (strcmp(v_, want))                                                            \
            fail_msg("%s: got %s, want %s", path, v_, want);                             \
        free(v_);                                                                        \
    } while (0)

/* ---- tests --------------------------------------------------------------- */

static void test_storage_counted_once(void **state)
{
    (void)state;
    char path[256];
    build_shared("shared", path, sizeof path);
    gt_memory *m = measure(path, 0, 0);
    assert_int_equal(m->n, 1);
    const gt_mem_call *c = &m->calls[0];
    assert_true(c->detailed);
    /* 400 (storage 10, through tensor 1 and its view 2) + 1000 + 24 */
    assert_int_equal(c->bytes, 1424);
    assert_int_equal(c->storages, 3);
    assert_int_equal(c->saved, 4);
    assert_int_equal(c->param_bytes, 0);
    assert_int_equal(c->live_bytes, 1424);
    /* the view was saved first: storage 10 goes to ReluBackward0 */
    assert_int_equal(c->n_node, 2);
    assert_string_equal(c->by_node[0].key, "MulBackward0");
    assert_int_equal(c->by_node[0].bytes, 1024);
    assert_int_equal(c->by_node[0].saved, 3);
    assert_string_equal(c->by_node[1].key, "ReluBackward0");
    assert_int_equal(c->by_node[1].bytes, 400);
    /* one entry per storage, largest first, with how many hold it */
    assert_int_equal(c->n_tensors, 3);
    assert_int_equal(c->tensors[0].bytes, 1000);
    assert_int_equal(c->tensors[0].holders, 1);
    assert_int_equal(c->tensors[1].bytes, 400);
    assert_int_equal(c->tensors[1].nbytes, 200); /* the view's own bytes */
    assert_int_equal(c->tensors[1].holders, 2);
    assert_string_equal(c->tensors[1].slot, "result");
    assert_int_equal(c->tensors[2].storage, 0);
    assert_int_equal(c->tensors[2].bytes, 24);
    /* the timeline grows to the total, in save order */
    assert_int_equal(c->n_points, 4);
    assert_int_equal(c->timeline[0].bytes, 400);
    assert_int_equal(c->timeline[3].bytes, 1424);
    /* by line: everything at model.py:10 (relative to no cwd) */
    assert_int_equal(c->n_line, 1);
    assert_string_equal(c->by_line[0].key, "/src/model.py:10");
    assert_string_equal(c->by_line[0].code, "y = x * w");
    gt_memory_free(m);

    /* the same through the command, text and JSON */
    captured out;
    memory_cmd(&out, path, NULL, NULL);
    assert_int_equal(out.status, 0);
    assert_non_null(strstr(out.out,
                           "backward call 1 (Tensor.backward at /src/model.py:90): "
                           "1.39 KiB held for backward at its start\n"));
    assert_non_null(strstr(out.out, "4 saved tensors on 3 storages"));
    assert_non_null(strstr(out.out, "\nby node type\n"));
    assert_non_null(strstr(out.out, "1.00 KiB  71.9%"));
    assert_string_equal(out.err, "");
    captured_free(&out);
    memory_cmd(&out, "--json", path, NULL);
    assert_int_equal(out.status, 0);
    assert_json(out.out, "$.backward", "1");
    assert_json(out.out, "$.calls[0].bytes", "1424");
    assert_json(out.out, "$.calls[0].storages", "3");
    assert_json(out.out, "$.calls[0].chosen", "1");
    assert_json(out.out, "$.calls[0].tensors[1].holders", "2");
    assert_json(out.out, "$.calls[0].tensors[1].shape", "[50]");
    assert_json(out.out, "$.calls[0].by_line[0].line", "/src/model.py:10");
    assert_json(out.out, "$.calls[0].timeline[3].bytes", "1424");
    captured_free(&out);

    /* the SQL view counts the same storages once */
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(
        sqlite3_prepare_v2(db,
                           "SELECT sum(counted_bytes), sum(first_on_storage),"
                           " max(storage_saved) FROM saved_bytes",
                           -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int64(st, 0), 1424);
    assert_int_equal(sqlite3_column_int64(st, 1), 3);
    assert_int_equal(sqlite3_column_int64(st, 2), 2);
    sqlite3_finalize(st);
    sqlite3_close(db);

    /* graph --bytes labels each node with what it holds */
    char dot[300];
    snprintf(dot, sizeof dot, "%s.dot", path);
    char *gargv[] = {"graph", "--bytes", "-o", dot, path, NULL};
    run_captured(gt_cmd_graph, 5, gargv, NULL, &out);
    assert_int_equal(out.status, 0);
    captured_free(&out);
    char *text = slurp_file(dot, NULL);
    assert_non_null(strstr(text, "holds 1.39 KiB")); /* MulBackward0: 400 + 1000 + 24 */
    assert_non_null(strstr(text, "holds 400 B"));    /* ReluBackward0 */
    assert_non_null(strstr(text, "fillcolor=\"#ff4d4d\""));
    free(text);
    unlink(dot);
    unlink(path);
}

/* Module paths: Net.forward calls self.fc (a Linear reading the parameter
 * named model.fc.weight) and self.act (a ReLU, no parameter), through
 * nn.Module's call frames, as a recorded stack holds them. */
static void test_modules_and_checkpointing(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "modules");
    gt_id fmod, fnet20, fnet21;
    gt_id smod = frame(&b, 0, 0, "<module>", 5, "loss = model(x).sum()", 0, &fmod);
    gt_id scall = frame(&b, smod, fmod, "Module._call_impl", 1789,
                        "return forward_call(*args, **kwargs)", 1, NULL);
    gt_id snet20 = frame(&b, scall, 0, "Net.forward", 20, "h = self.fc(x)", 0, &fnet20);
    gt_id scall2 = frame(&b, snet20, fnet20, "Module._call_impl", 1789,
                         "return forward_call(*args, **kwargs)", 1, NULL);
    gt_id slin = frame(&b, scall2, fnet20, "Linear.forward", 125,
                       "return F.linear(input, self.weight, self.bias)", 1, NULL);
    gt_id snet21 =
        frame(&b, scall, 0, "Net.forward", 21, "return self.act(h)", 0, &fnet21);
    gt_id scall3 = frame(&b, snet21, fnet21, "Module._call_impl", 1789,
                         "return forward_call(*args, **kwargs)", 1, NULL);
    gt_id srelu =
        frame(&b, scall3, fnet21, "ReLU.forward", 143, "return F.relu(input)", 1, NULL);

    storage(&b, 1, 64);  /* x, made before the forward */
    storage(&b, 2, 128); /* model.fc.weight */
    storage(&b, 3, 32);  /* the linear's output, saved by nobody */
    storage(&b, 4, 32);  /* relu's output */
    tensor(&b, 1, 1, 16, 0, 1, 0, 0);
    tensor(&b, 2, 2, 32, 0, 1, 1, 0);
    int64_t lin = op(&b, "aten::linear", slin);
    assert_int_equal(gt_op_arg(b.r, lin, GT_ROLE_INPUT, 0, 1, 0), 0);
    assert_int_equal(gt_op_arg(b.r, lin, GT_ROLE_INPUT, 1, 2, 0), 0);
    tensor(&b, 3, 3, 8, lin, 0, 1, 0);
    node(&b, 10, "MmBackward0", lin);
    save(&b, 10, "self", 1, 64);
    save(&b, 10, "mat2", 2, 128);
    int64_t relu = op(&b, "aten::relu", srelu);
    assert_int_equal(gt_op_arg(b.r, relu, GT_ROLE_INPUT, 0, 3, 0), 0);
    tensor(&b, 4, 4, 8, relu, 0, 1, 0);
    node(&b, 11, "ReluBackward0", relu);
    save(&b, 11, "result", 4, 32);
    assert_int_equal(gt_edge(b.r, 11, 0, 10, 0), 0);
    gt_id bw = backward(&b, 11, 0);
    assert_int_equal(gt_name(b.r, gt_recorder_seq(b.r), 2, "model.fc.weight"), 0);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    char path[256];
    snprintf(path, sizeof path, "%s", b.path);
    close_trace(&b);

    gt_memory *m = measure(path, 0, 0);
    const gt_mem_call *c = &m->calls[0];
    assert_int_equal(c->bytes, 224);
    assert_int_equal(c->param_bytes, 128);
    assert_int_equal(c->n_module, 2);
    assert_string_equal(c->by_module[0].key, "model.fc");
    assert_int_equal(c->by_module[0].bytes, 192);
    assert_string_equal(c->by_module[1].key, "model.act"); /* from `self.act(h)` */
    assert_int_equal(c->by_module[1].bytes, 32);
    /* by line: the user's lines in Net.forward */
    assert_string_equal(c->by_line[0].key, "/src/model.py:20");
    assert_string_equal(c->by_line[1].key, "/src/model.py:21");
    /* checkpointing: model and model.act made relu's output and alone hold
     * it; model.fc holds only what came from outside (x, the weight) */
    assert_int_equal(c->n_modules, 3);
    for (size_t i = 0; i < c->n_modules; i++) {
        const gt_mem_module *k = &c->modules[i];
        if (!strcmp(k->path, "model")) {
            assert_int_equal(k->held, 224);
            assert_int_equal(k->kept, 192);
            assert_int_equal(k->frees, 32);
        } else if (!strcmp(k->path, "model.act")) {
            assert_int_equal(k->held, 32);
            assert_int_equal(k->frees, 32);
        } else {
            assert_string_equal(k->path, "model.fc");
            assert_int_equal(k->held, 192);
            assert_int_equal(k->kept, 192);
            assert_int_equal(k->frees, 0);
        }
        assert_int_equal(k->held, k->kept + k->shared + k->frees);
    }
    gt_memory_free(m);
    unlink(path);
}

/* nn.Sequential(Linear, ReLU, Linear): the ReLU, called by index with no
 * parameter, is the number after the Linear before it. */
static void test_sequential_numbering(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "sequential");
    gt_id fmod, fseq;
    gt_id smod = frame(&b, 0, 0, "<module>", 5, "loss = model(x).sum()", 0, &fmod);
    gt_id scall = frame(&b, smod, fmod, "Module._call_impl", 1789,
                        "return forward_call(*args, **kwargs)", 1, NULL);
    gt_id sseq = frame(&b, scall, fmod, "Sequential.forward", 253,
                       "input = module(input)", 1, &fseq);
    gt_id scall2 = frame(&b, sseq, fmod, "Module._call_impl", 1789,
                         "return forward_call(*args, **kwargs)", 1, NULL);
    gt_id slin = frame(&b, scall2, fmod, "Linear.forward", 125,
                       "return F.linear(input, self.weight, self.bias)", 1, NULL);
    gt_id srelu =
        frame(&b, scall2, fmod, "ReLU.forward", 143, "return F.relu(input)", 1, NULL);
    gt_id ids[] = {1, 2, 3}, weights[] = {11, 0, 13};
    const char *names[] = {"model.0.weight", NULL, "model.2.weight"};
    for (int i = 0; i < 3; i++) {
        storage(&b, 20 + i, 64);
        if (weights[i]) {
            storage(&b, 30 + i, 16);
            tensor(&b, weights[i], 30 + i, 4, 0, 1, 1, 0);
        }
        int64_t o =
            op(&b, weights[i] ? "aten::linear" : "aten::relu", weights[i] ? slin : srelu);
        if (weights[i])
            assert_int_equal(gt_op_arg(b.r, o, GT_ROLE_INPUT, 0, weights[i], 0), 0);
        tensor(&b, ids[i], 20 + i, 16, o, 0, 1, 0);
        node(&b, 40 + i, weights[i] ? "MmBackward0" : "ReluBackward0", o);
        save(&b, 40 + i, "result", ids[i], 64);
        if (i)
            assert_int_equal(gt_edge(b.r, 40 + i, 0, 40 + i - 1, 0), 0);
    }
    gt_id bw = backward(&b, 42, 0);
    for (int i = 0; i < 3; i++)
        if (names[i])
            assert_int_equal(gt_name(b.r, gt_recorder_seq(b.r), weights[i], names[i]), 0);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    char path[256];
    snprintf(path, sizeof path, "%s", b.path);
    close_trace(&b);
    gt_memory *m = measure(path, 0, 0);
    const gt_mem_call *c = &m->calls[0];
    assert_int_equal(c->n_module, 3);
    /* equal bytes: in the order they were saved */
    assert_string_equal(c->by_module[0].key, "model.0");
    assert_string_equal(c->by_module[1].key, "model.1");
    assert_string_equal(c->by_module[2].key, "model.2");
    gt_memory_free(m);
    unlink(path);
}

/* Two graphs, two backward calls: the first runs its node without
 * retain_graph (freed), the second holds more and is the default. */
static void build_calls(const char *name, int retain, char *path, size_t size)
{
    tb b;
    tb_open(&b, name);
    gt_id s = tb_stack(&b, 30, "y = f(x)");
    storage(&b, 1, 100);
    storage(&b, 2, 300);
    storage(&b, 3, 50);
    int64_t o = op(&b, "aten::exp", s);
    tensor(&b, 1, 1, 25, o, 0, 1, 0);
    node(&b, 1, "ExpBackward0", o);
    save(&b, 1, "result", 1, 100);
    gt_id bw = backward(&b, 1, retain);
    assert_int_equal(gt_node_exec(b.r, bw, 1), 0);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    o = op(&b, "aten::exp", s);
    tensor(&b, 2, 2, 75, o, 0, 1, 0);
    node(&b, 2, "ExpBackward0", o);
    save(&b, 2, "result", 2, 300);
    o = op(&b, "aten::sin", s);
    tensor(&b, 3, 3, 12, o, 0, 1, 0);
    node(&b, 3, "SinBackward0", o);
    save(&b, 3, "self", 3, 48);
    assert_int_equal(gt_edge(b.r, 3, 0, 2, 0), 0);
    bw = backward(&b, 3, 0);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    snprintf(path, size, "%s", b.path);
    close_trace(&b);
}

static void test_backward_calls(void **state)
{
    (void)state;
    char path[256];
    build_calls("calls", 0, path, sizeof path);
    gt_memory *m = measure(path, 0, 0);
    assert_int_equal(m->n, 2);
    assert_int_equal(m->chosen, 1); /* the largest */
    assert_int_equal(m->calls[0].bytes, 100);
    assert_false(m->calls[0].detailed);
    assert_int_equal(m->calls[1].bytes, 350);
    assert_true(m->calls[1].detailed);
    /* call 1 ran node 1 without retain_graph: freed by call 2's start */
    assert_int_equal(m->calls[1].live_bytes, 350);
    gt_memory_free(m);
    m = measure(path, 1, 0);
    assert_int_equal(m->chosen, 0);
    assert_true(m->calls[0].detailed);
    assert_false(m->calls[1].detailed);
    gt_memory_free(m);
    m = measure(path, 0, 1);
    assert_true(m->calls[0].detailed && m->calls[1].detailed);
    gt_memory_free(m);

    captured c;
    memory_cmd(&c, "--call", "9", path);
    assert_int_equal(c.status, 2);
    assert_non_null(strstr(c.err, "no backward call 9 (2 recorded)\n"));
    assert_ptr_equal(strchr(c.err, '\n'), c.err + strlen(c.err) - 1); /* one line */
    captured_free(&c);
    memory_cmd(&c, "--all", path, NULL);
    assert_int_equal(c.status, 0);
    assert_non_null(strstr(c.out, "backward call 1 (Tensor.backward"));
    assert_non_null(strstr(c.out, "backward call 2 (Tensor.backward"));
    captured_free(&c);
    memory_cmd(&c, "--top", "x", path);
    assert_int_equal(c.status, 2);
    assert_non_null(
        strstr(c.err, "gradtrace: memory: --top wants a number >= 0, not 'x'"));
    captured_free(&c);
    unlink(path);

    /* with retain_graph, call 1's graph is still held when call 2 starts */
    build_calls("retained", 1, path, sizeof path);
    m = measure(path, 0, 0);
    assert_int_equal(m->calls[1].bytes, 350);
    assert_int_equal(m->calls[1].live_bytes, 450);
    gt_memory_free(m);
    unlink(path);
}

static void test_empty_and_not_a_trace(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "empty");
    char path[256];
    snprintf(path, sizeof path, "%s", b.path);
    close_trace(&b);
    captured c;
    memory_cmd(&c, path, NULL, NULL);
    assert_int_equal(c.status, 0);
    assert_non_null(strstr(c.out, "no backward call in"));
    captured_free(&c);
    memory_cmd(&c, "--json", path, NULL);
    assert_int_equal(c.status, 0);
    assert_json(c.out, "$.backward", "NULL");
    assert_json(c.out, "$.calls", "[]");
    captured_free(&c);
    unlink(path);

    /* a text file, an empty file, a missing file: one line, status 2 */
    const char *bad[] = {"/tmp/gt_test_memory_text.db", "/tmp/gt_test_memory_none.db",
                         "/tmp/gt_test_memory_zero.db"};
    FILE *f = fopen(bad[0], "w");
    fputs("not a database\n", f);
    fclose(f);
    fclose(fopen(bad[2], "w"));
    for (int i = 0; i < 3; i++) {
        memory_cmd(&c, bad[i], NULL, NULL);
        assert_int_equal(c.status, 2);
        assert_string_equal(c.out, "");
        assert_true(!strncmp(c.err, "gradtrace: ", 11));
        assert_ptr_equal(strchr(c.err, '\n'), c.err + strlen(c.err) - 1);
        captured_free(&c);
    }
    unlink(bad[0]);
    unlink(bad[2]);
}

static void test_human(void **state)
{
    (void)state;
    char buf[32];
    assert_string_equal(gt_mem_human(0, buf, sizeof buf), "0 B");
    assert_string_equal(gt_mem_human(1023, buf, sizeof buf), "1023 B");
    assert_string_equal(gt_mem_human(1024, buf, sizeof buf), "1.00 KiB");
    assert_string_equal(gt_mem_human(16 * 1024 + 256, buf, sizeof buf), "16.2 KiB");
    assert_string_equal(gt_mem_human(300 * 1024, buf, sizeof buf), "300 KiB");
    assert_string_equal(gt_mem_human(48409188, buf, sizeof buf), "46.2 MiB");
    assert_string_equal(gt_mem_human(3LL << 30, buf, sizeof buf), "3.00 GiB");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_storage_counted_once),
        cmocka_unit_test(test_modules_and_checkpointing),
        cmocka_unit_test(test_sequential_numbering),
        cmocka_unit_test(test_backward_calls),
        cmocka_unit_test(test_empty_and_not_a_trace),
        cmocka_unit_test(test_human),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

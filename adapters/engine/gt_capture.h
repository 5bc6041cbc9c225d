/*
 * gt_capture: what the libtorch shim (capture.cpp) hands to C.
 *
 * Invariants
 *   - The shim observes the engine through one at::RecordFunction callback
 *     and writes fixed-layout records (below) into per-thread "lanes": a
 *     chain of fixed-size chunks. The training thread is the only writer of
 *     its lane; one consumer (fold.c) reads every lane. Per op the writer
 *     takes no lock, calls no Python and no SQLite, and allocates nothing
 *     once its lane has spare chunks: a chunk the consumer has read goes back
 *     to its lane's free ring (single producer, single consumer, atomics
 *     only).
 *   - A lane's chunk publishes how many bytes hold whole records (`used`,
 *     written with release order after the records); the consumer reads up
 *     to it with acquire order, so it may read a chunk while it fills.
 *   - Records carry raw engine addresses (TensorImpl, StorageImpl, version
 *     counter, Node). Only the consumer turns them into trace ids; addresses
 *     may be reused once an object dies, which the consumer's rules handle
 *     (see fold.c). Node ids are assigned by the shim, which holds a weak
 *     reference on every node it named, so a named node's address is never
 *     reused while it is named.
 *   - Every record has a stamp from one process-wide counter (taken once per
 *     op or Python event, shared by the records of that op), so the consumer
 *     can merge lanes in order.
 *   - Strings a record points to (op names, node class names, slot names)
 *     live as long as the capture: the consumer may keep the pointers.
 *
 * The functions return 0 on success and a negative value on failure; they
 * never throw and never call Python unless said so.
 */
#ifndef GRADTRACE_CAPTURE_H
#define GRADTRACE_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GT_CAP_CHUNK (256 * 1024)
/* Sizes and strides are recorded for tensors of at most this many
 * dimensions, the recorder's own limit (gt_tensor): a record then takes at
 * most 64 KiB of a chunk. */
#define GT_CAP_MAXDIM 4096
#define GT_CAP_RING   64 /* recycled chunks a lane keeps */

enum gt_cap_type {
    GT_CAP_OP = 1,    /* an op seen at the dispatch level (gt_cap_op) */
    GT_CAP_ARG,       /* one tensor argument or output (gt_cap_arg) */
    GT_CAP_END,       /* versions of the op's inputs after it ran (gt_cap_end) */
    GT_CAP_NODE,      /* a new autograd node and its edges (gt_cap_node) */
    GT_CAP_NODE_OUT,  /* an output of a new node (gt_cap_node_out) */
    GT_CAP_SAVED,     /* a tensor a new node saved (gt_cap_saved) */
    GT_CAP_EXEC,      /* the engine ran a node (gt_cap_exec) */
    GT_CAP_STACK,     /* first sight of a Python stack (gt_cap_stack) */
    GT_CAP_BWD_BEGIN, /* a backward call (gt_cap_bwd) */
    GT_CAP_BWD_ROOT,  /* a root of it (gt_cap_bwd_tensor) */
    GT_CAP_BWD_INPUT, /* an inputs= tensor of it (gt_cap_bwd_tensor) */
    GT_CAP_BWD_END,   /* it returned or raised (gt_cap_bwd) */
    GT_CAP_ERROR,     /* an exception (gt_cap_text) */
    GT_CAP_NAME,      /* a variable name bound to a tensor (gt_cap_name) */
    GT_CAP_THREAD,    /* the lane's thread name (gt_cap_text) */
    GT_CAP_MARK,      /* nothing: wakes the consumer (flush) */
    GT_CAP_REFRESH,   /* a previous op's output, seen again (gt_cap_refresh) */
    GT_CAP_CALL_END,  /* a call into user code returned (gt_cap_call_end);
                       * its outputs and the nodes they got follow */
    GT_CAP_CALL_POP,  /* the call is over (gt_cap_call_end) */
    GT_CAP_SWAP_SEEN, /* a saved tensor's storage at a backward call's start,
                       * other than at its last sighting (gt_cap_bwd_tensor) */
    GT_CAP_DATA_SET,  /* `t.data = v` moved t to other memory (gt_cap_data_set) */
    GT_CAP_FP_USE,    /* check_saved: a saved tensor's bytes when its node
                       * starts in backward (gt_cap_fp_use) */
    GT_CAP_VERS,      /* versions after the op of some of its inputs, before
                       * the GT_CAP_END that has the last ones (gt_cap_end) */
    GT_CAP_EDGES,     /* more edges of the node just recorded (gt_cap_edges) */
    GT_CAP_MORE,      /* more of the text of the record before (gt_cap_more) */
};

/* gt_cap_op.h.flags of a Python-level call into user code (call_begin):
 * an op row named after the call; its tensor arguments follow as GT_CAP_IN */
enum { GT_CAP_OPF_CALL = 1, GT_CAP_OPF_REGION = 2 /* a checkpoint region */ };

/* Every record starts with this header; len (whole record, bytes) is a
 * multiple of 8. */
typedef struct gt_cap_hdr {
    uint16_t type;
    uint16_t flags;
    uint32_t len;
    uint64_t stamp;
} gt_cap_hdr;

/* Facts about one tensor, as the hot path reads them. */
enum {
    GT_CAPT_UNDEF = 1,      /* undefined tensor (other fields zero) */
    GT_CAPT_NOVC = 2,       /* no version counter (inference tensor) */
    GT_CAPT_REQGRAD = 4,    /* requires_grad */
    GT_CAPT_LEAF = 8,       /* is a leaf (no grad_fn) */
    GT_CAPT_WRITTEN = 16,   /* the op's schema marks it written */
    GT_CAPT_NOGEOM = 32,    /* no strided geometry (sparse, nested, symbolic) */
    GT_CAPT_UNMARKED = 128, /* written without the schema saying so (a c10d
                             * collective): no bump is the op's */
    GT_CAPT_NOBUMP = 256,   /* written maybe without a bump: if its counter
                             * did not move, a kernel write (kernel_writes) */
    GT_CAPT_WEAK = 64,      /* the record holds a weak reference on impl: the
                             * consumer keeps it (gt_capture_weak_alive) or
                             * gives it back (gt_capture_weak_release) */
};

typedef struct gt_cap_tensor {
    const void *impl;    /* TensorImpl */
    const void *storage; /* StorageImpl, NULL if none */
    const void *vc;      /* version counter, NULL if none */
    const char *dtype;   /* "float32", ... (static) */
    const char *device;  /* "cpu", ... (interned by the shim) */
    int64_t offset;      /* storage offset, elements */
    int64_t nbytes;      /* the storage's bytes */
    uint32_t version;
    uint16_t flags; /* GT_CAPT_* */
    uint16_t ndim;  /* sizes then strides follow the record, int64 each */
} gt_cap_tensor;

typedef struct gt_cap_op {
    gt_cap_hdr h;
    const char *name; /* "aten::mul_.Tensor" */
    int64_t os_tid;
    uint32_t stack; /* stack key id, 0 for none */
    uint8_t grad_mode;
    uint8_t in_backward; /* inside a node's apply or a recorded backward call */
    uint8_t pad[2];
} gt_cap_op;

enum { GT_CAP_IN = 0, GT_CAP_OUT = 1 };

typedef struct gt_cap_call_end {
    gt_cap_hdr h;
    uint64_t call; /* the stamp of the call's GT_CAP_OP record */
} gt_cap_call_end;

typedef struct gt_cap_arg {
    gt_cap_hdr h;
    uint8_t role; /* GT_CAP_IN or GT_CAP_OUT */
    uint8_t pad[3];
    int32_t pos;     /* schema position (inputs) or output index */
    gt_cap_tensor t; /* followed by ndim sizes and ndim strides */
} gt_cap_arg;

/* An op with more inputs than a record holds (GT_CAP_VERS_MAX) has its
 * versions in several: GT_CAP_VERS records, then the GT_CAP_END. */
/* gt_cap_end.h.flags: the op ended by an exception */
enum { GT_CAP_ENDF_RAISED = 1 };

typedef struct gt_cap_end {
    gt_cap_hdr h;
    uint32_t n;     /* followed by n uint32 versions, in GT_CAP_IN order, */
    uint32_t first; /* of the inputs first..first + n - 1 */
} gt_cap_end;
#define GT_CAP_VERS_MAX ((GT_CAP_CHUNK / 4 - sizeof(gt_cap_end)) / 4)

typedef struct gt_cap_edge {
    uint64_t next; /* node id, 0 for an empty edge */
    uint32_t input_nr;
    uint32_t pad;
} gt_cap_edge;

/* gt_cap_node.h.flags: the node is an output's grad_fn of the lane's
 * current op (or call), made by it; others were reached through edges */
enum { GT_CAP_NODEF_OF_OP = 1 };

typedef struct gt_cap_node {
    gt_cap_hdr h;
    uint64_t id;         /* assigned by the shim, > 0 */
    const char *name;    /* "MulBackward0" */
    int64_t sequence_nr; /* < 0 for none */
    int64_t os_tid;
    const void *variable_impl; /* AccumulateGrad's leaf, else NULL */
    const void *variable_vc;
    uint32_t nedges; /* followed by nedges gt_cap_edge (at most
                      * GT_CAP_EDGES_MAX; GT_CAP_EDGES records have the rest) */
    uint32_t pad;
} gt_cap_node;

typedef struct gt_cap_edges {
    gt_cap_hdr h;
    uint64_t node;  /* the node's id */
    uint32_t first; /* the position of the first edge here */
    uint32_t n;     /* followed by n gt_cap_edge */
} gt_cap_edges;
#define GT_CAP_EDGES_MAX ((GT_CAP_CHUNK / 4 - sizeof(gt_cap_edges)) / sizeof(gt_cap_edge))

typedef struct gt_cap_node_out {
    gt_cap_hdr h;
    uint64_t node;
    const void *impl;
    const void *vc;
    uint32_t output_nr;
    uint32_t pad;
} gt_cap_node_out;

typedef struct gt_cap_saved {
    gt_cap_hdr h;
    uint64_t node;
    const char *slot;
    int64_t saved_version;
    int64_t nbytes; /* bytes of the saved tensor's storage, -1 unknown */
    uint8_t is_output;
    uint8_t pad[7];
    int64_t hashed;  /* check_saved: bytes fingerprinted now, -1 none */
    uint64_t hash;   /* their XXH3 */
    gt_cap_tensor t; /* impl NULL if not readable; no geometry follows */
} gt_cap_saved;

/* check_saved: the fingerprint of what node `node` saved in `slot` (the
 * same string pointer as its gt_cap_saved), taken as the node starts. */
typedef struct gt_cap_fp_use {
    gt_cap_hdr h;
    uint64_t node;
    const char *slot;
    int64_t hashed;
    uint64_t hash;
} gt_cap_fp_use;

typedef struct gt_cap_exec {
    gt_cap_hdr h;
    uint64_t node; /* 0: a node never named (created before recording) */
} gt_cap_exec;

/* A stack seen for the first time: its frames first..first + nframes - 1,
 * counted from the outermost, follow the record, outermost first, each:
 * int32 line, int32 kind (0 user, 1 engine; GT_CAP_FRAME_MODULE added when
 * the frame's `self` is an nn.Module), then three NUL-terminated strings
 * file, function, code (may be empty), and with GT_CAP_FRAME_MODULE a
 * fourth, the module's path (stacks.module, may be empty), padded so the
 * next frame starts 4-aligned. A stack of any depth: one whose frames take more than
 * GT_CAP_STACK_BYTES comes in several records of the same id, written one
 * after the other on its lane (first 0, then where the previous ended),
 * each but the last flagged GT_CAP_STACKF_MORE. One frame takes at most
 * GT_CAP_STACK_BYTES (its strings are cut to fit, code first). */
enum { GT_CAP_STACKF_MORE = 1 };
enum { GT_CAP_FRAME_MODULE = 0x100 };

typedef struct gt_cap_stack {
    gt_cap_hdr h;
    uint32_t id;
    uint32_t nframes;
    uint32_t first;
    uint32_t pad;
} gt_cap_stack;
#define GT_CAP_STACK_BYTES (GT_CAP_CHUNK / 4 - sizeof(gt_cap_stack))

typedef struct gt_cap_bwd {
    gt_cap_hdr h;
    const char *api; /* static string; NULL for GT_CAP_BWD_END */
    int64_t os_tid;
    uint32_t stack;
    uint8_t retain_graph, create_graph, ok;
    uint8_t pad;
} gt_cap_bwd;

typedef struct gt_cap_bwd_tensor {
    gt_cap_hdr h;
    int32_t pos;
    uint32_t pad;
    const void *node; /* the root's grad_fn node id (as uint64), 0 none */
    gt_cap_tensor t;
} gt_cap_bwd_tensor;

/* Text records: GT_CAP_ERROR (a = type, b = message; stack in `stack`),
 * GT_CAP_THREAD (a = name). a and b follow, NUL-terminated, whole (a long
 * text in GT_CAP_MORE records, see GT_CAP_TEXTF_MORE). */
typedef struct gt_cap_text {
    gt_cap_hdr h;
    int64_t os_tid;
    uint32_t stack;
    uint32_t alen; /* bytes of a, NUL included; b follows */
} gt_cap_text;

/* gt_cap_name.h.flags: the name was seen at the lane's current op */
enum { GT_CAP_NAMEF_OP = 1 };

typedef struct gt_cap_name {
    gt_cap_hdr h;
    const void *impl;
    const void *vc;
    /* NUL-terminated name follows, whole (see GT_CAP_TEXTF_MORE) */
} gt_cap_name;

/* Text of any length (an error's type and message, a variable name): a
 * text record (gt_cap_text, gt_cap_name) whose text, the bytes after its
 * struct, takes more than GT_CAP_MORE_BYTES comes as its struct alone,
 * flagged GT_CAP_TEXTF_MORE, followed on its lane by GT_CAP_MORE records
 * that carry the text in order, each but the last flagged
 * GT_CAP_TEXTF_MORE. The consumer puts the record together before reading
 * it; one whose text did not all come (a record lost) is no record. */
enum { GT_CAP_TEXTF_MORE = 2 };

typedef struct gt_cap_more {
    gt_cap_hdr h;
    uint64_t off; /* bytes of the text before these */
    uint64_t n;   /* followed by n bytes of it */
} gt_cap_more;
#define GT_CAP_MORE_BYTES (GT_CAP_CHUNK / 4 - sizeof(gt_cap_more))

/* `t.data = v` (no op, no version bump) moved t to other memory: t before
 * the assignment (GT_CAPT_WEAK; its ndim sizes then strides follow the
 * record) and after it, at the assigning line's stack. */
typedef struct gt_cap_data_set {
    gt_cap_hdr h;
    uint32_t stack;
    uint32_t pad;
    gt_cap_tensor old;
    gt_cap_tensor now; /* no geometry */
} gt_cap_data_set;

/* An output of the thread's previous op that did not require grad then,
 * read again at the next op (nn.Parameter sets requires_grad after the op
 * that made its tensor). */
typedef struct gt_cap_refresh {
    gt_cap_hdr h;
    const void *impl;
    const void *vc;
    uint16_t flags; /* GT_CAPT_* now */
    uint8_t pad[6];
} gt_cap_refresh;

/* ---- lanes (read by the consumer) ----------------------------------------- */

typedef struct gt_cap_chunk {
    struct gt_cap_chunk *next; /* set (release) when the writer moved on */
    size_t used;               /* bytes of whole records (release/acquire) */
    unsigned char data[GT_CAP_CHUNK];
} gt_cap_chunk;

typedef struct gt_cap_lane {
    struct gt_cap_lane *next_lane; /* list of all lanes, append-only */
    int64_t os_tid;
    gt_cap_chunk *read; /* consumer: chunk being read */
    size_t read_off;    /* consumer: offset in it */
    void *consumer;     /* consumer's per-lane state */
    /* free ring: the consumer pushes read chunks, the writer pops them */
    gt_cap_chunk *ring[GT_CAP_RING];
    uint64_t ring_head, ring_tail; /* atomics: tail pushes, head pops */
    int retired;                   /* the thread ended (no more writes) */
} gt_cap_lane;

/* ---- control (called with the GIL held, from the recording thread) -------- */

/* Options for gt_capture_start. */
typedef struct gt_capture_opts {
    /* stack key of the calling thread's Python stack, 0 if none; called per
     * recorded op without the GIL; NULL: no stacks */
    uint32_t (*stack_key)(void);
    int all_threads; /* capture ops of every thread (global callback) */
    /* after an op wrote tensor t (a view of base, or base NULL), on the
     * op's thread, without the GIL; stack is the op's stack key; writes
     * GT_CAP_NAME records through gt_capture_reserve. NULL: no names */
    void (*names)(uint32_t stack, const gt_cap_tensor *t, const gt_cap_tensor *base);
    /* how every saved CPU tensor is fingerprinted at save and as its node
     * starts in backward (GT_FP_* of common/fingerprint.h, 0 none;
     * saved_fingerprints, --check-saved) */
    int check_saved;
} gt_capture_opts;

/* The torch version the shim was built for ("2.13.0+cpu"). */
const char *gt_capture_built_for(void);

/* Check that the running torch matches the build and that the shim reads
 * back a known graph (saved tensors, versions, slots). Returns 0, or -1
 * with a one-line reason in errbuf. GRADTRACE_ENGINE_SELFTEST=fail makes
 * it fail (for tests). */
int gt_capture_selftest(const char *running_version, char *errbuf, size_t errlen);

/* Start capturing. Returns 0, -1 if a capture is on (message in errbuf). */
int gt_capture_start(const gt_capture_opts *opts, char *errbuf, size_t errlen);

/* Stop: remove the callback; lanes stay readable until gt_capture_release.
 * Publishes every lane's partial chunk. Can't fail. */
void gt_capture_stop(void);

/* Free every lane and chunk (after the consumer finished). */
void gt_capture_release(void);

/* The first lane (then ->next_lane, read with acquire), NULL if none. */
gt_cap_lane *gt_capture_lanes(void);

/* Pause/resume recording of ops (windows): 1 records, 0 skips. */
void gt_capture_set_active(int on);

/* Forked child: never touch the parent's lanes again; drop the callback. */
void gt_capture_forked(void);

/* ---- consumer side helpers ------------------------------------------------ */

/* A weak reference a record carried (GT_CAPT_WEAK): while the consumer
 * holds it, impl's address is not reused, so a live impl is the same
 * tensor; alive tells whether the tensor still exists. Any thread. */
int gt_capture_weak_alive(const void *impl);
/* impl is dead and the caller's is its last weak reference */
int gt_capture_weak_forgettable(const void *impl);
void gt_capture_weak_release(const void *impl);
/* The calling thread's capture lets go of its weak references to impl
 * (outputs to refresh, saved tensors to watch): before swap_tensors. */
void gt_capture_forget(const void *impl);

/* Give chunk c (fully read) back to its lane's free ring, or free it. */
void gt_capture_recycle(gt_cap_lane *lane, gt_cap_chunk *c);

/* ---- Python-side events (GIL held, on the calling thread's lane) ---------- */

/* Describe a Python tensor object; 0 if it is a tensor, -1 if not. */
int gt_capture_pytensor(void *pyobj, gt_cap_tensor *out /* OUT */,
                        const void **grad_fn /* OUT, may be NULL */);

/* Reserve len bytes (multiple of 8, header included) on this thread's lane,
 * stamped; fill in the header's type. Returns NULL when not capturing.
 * gt_capture_commit publishes it. */
void *gt_capture_reserve(int type, size_t len);
void gt_capture_commit(void);

/* Node id of a Node* (as gt_cap_bwd_tensor.node carries it), 0 if unnamed. */
uint64_t gt_capture_node_id(const void *node);

/* A Python-level call into user code (a custom autograd.Function's apply,
 * a checkpointed function), GIL held: an op record named `name` (a string
 * living as long as the capture) with GT_CAP_OPF_CALL (and _REGION for a
 * non-reentrant checkpoint, whose nodes save through hooks) and the tensors
 * of the Python object args (nested tuples and lists) as inputs. Returns the
 * call's stamp, 0 when not capturing. */
uint64_t gt_capture_call_begin(const char *name, uint32_t stack, int region, void *args);

/* The call of stamp `call` returned result (a Python object, NULL if it
 * raised): its tensors as outputs, the nodes they got, then the call's end. */
void gt_capture_call_end(uint64_t call, void *result);

/* At a backward call's start (GIL held, after its GT_CAP_BWD_BEGIN): the
 * tensors this thread's nodes saved that now live on other memory than when
 * they were saved or last checked (`.data =`), as GT_CAP_SWAP_SEEN records;
 * forgets the dead ones. */
void gt_capture_check_saved(void);

/* `tensor.data = value` on the Python tensor object `tensor` (GIL held):
 * runs assign(ctx), which performs the assignment, and when capturing (in
 * the window) and it moved the tensor to other memory, writes a
 * GT_CAP_DATA_SET record with stack key `stack`. Returns what assign
 * returned (its error is the caller's). */
int gt_capture_data_set(void *tensor, uint32_t stack, int (*assign)(void *ctx),
                        void *ctx);

/* Under torch.func the shim records the storage and geometry of the tensor
 * a wrapper wraps. Check, on a GradTrackingTensor `wrapper` (a Python
 * object) and the tensor it wraps `inner`, that the shim reads a wrapper's
 * tensor right (a layout mirror: its header is not includable); 0 turns
 * looking through GradTrackingTensors on, -1 leaves it off. */
int gt_capture_wrapper_check(void *wrapper, void *inner);

/* For tests: what the shim makes of the schema of an operator (a string
 * as torch.library defines one, name included) that it sees run: one
 * character per argument, '.' not written, 'w' written as the schema says,
 * 'u' written without the schema saying so (a c10d collective's), into out
 * (NUL-terminated). Returns the number of arguments, or -1 if the schema
 * does not parse or out is too small. */
int gt_capture_schema_writes(const char *schema, char *out, size_t outlen);

/* Backward-call depth (phase of ops on any thread): +1 / -1. */
void gt_capture_backward_depth(int delta);

#ifdef __cplusplus
}
#endif

#endif /* GRADTRACE_CAPTURE_H */

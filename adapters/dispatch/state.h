/*
 * state.h: what the files of the dispatch adapter (_gradtrace) share: the
 * recorder object's state (gt_pyrec) and the entries it keeps, the module
 * state, a few one-line helpers every file calls, and the gt__ functions one
 * file defines for another. Laid out by object, as CPython's Modules/_sqlite:
 *
 *   module.c    module state, init, module-level functions
 *   recorder.c  the Recorder type: lifecycle, Python methods, getters
 *   dispatch.c  the per-op path: dispatch(func, args, kwargs) and its helpers
 *   node.c      autograd nodes: discovery, pending outputs, node_execs
 *   saved.c     saved tensors: matching, fingerprints, checkpoint regions
 *   tensor.c    tensor facts and ids: entries, storages, versions
 *   ent.c       the TensorEntry type (a recorded tensor's weakref callback)
 *   stack.c     Python stacks, frames and module paths
 *   names.c     variable names bound to recorded tensors
 *   functorch.c torch.func's wrapped tensors
 *   kwrites.c   kernel writes: writes that move no version
 *   util.c      attribute readers, interning, per-op scratch
 *
 * Nothing here is exported: each extension exports only PyInit__gradtrace.
 */
#ifndef GT_DISPATCH_STATE_H
#define GT_DISPATCH_STATE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

#include <gradtrace/recorder.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "gt_pyrun.h"
#include "protocol.h"
#include "gtmap.h"

typedef struct {
    PyObject *type, *value, *tb;
} excsave;

static inline excsave exc_save(void)
{
    excsave e;
    PyErr_Fetch(&e.type, &e.value, &e.tb);
    return e;
}

static inline void exc_restore(excsave e)
{
    PyErr_Restore(e.type, e.value, e.tb);
}

/* Nested lists deeper than this in an op's arguments are not searched for
 * tensors (no aten schema nests more than two). */
#define MAX_NESTING 32

typedef struct gt_vc {
    gt_id id;          /* version counter id: the first tensor seen with it */
    int64_t expected;  /* the value we believe the counter has */
    int64_t bumped_at; /* seq of the op that last predicted a bump on it */
    int refs;
} gt_vc;

struct gt_tensor_ent;

typedef struct gt_storage_ent {
    gt_id id;
    uint64_t key;
    int64_t impl; /* its StorageImpl's address (UntypedStorage._cdata), 0 if unknown */
    int refs;
    int64_t nbytes; /* its row, to write it again after a window cut */
    gt_id device;
    uint64_t epoch;                    /* gt_recorder_cuts when its row was written */
    struct gt_tensor_ent *head, *tail; /* live recorded tensors on it, oldest first */
} gt_storage_ent;

typedef struct gt_tensor_ent {
    PyObject_HEAD struct gt_pyrec *rec; /* NULL once forgotten */
    PyObject *wr;                       /* weakref to the tensor, with this as callback */
    uintptr_t addr; /* the tensor object's address: key in rec->tensors */
    gt_id id;
    gt_vc *vc;
    gt_storage_ent *st;
    struct gt_tensor_ent *st_prev, *st_next;
    gt_id dtype;
    int64_t created_by;
    int64_t last_out; /* seq of the last op that output or mutated it */
    gt_id alias_of;   /* for the tensors row, written later for outputs */
    int shares;
    int written;     /* its tensors row is written */
    uint64_t wepoch; /* gt_recorder_cuts when it was made or its row written */
    int saved;       /* a node saved it: its storage is watched */
    int itemsize;    /* bytes per element when first seen */
    int64_t seen;    /* event seq when it was last seen on its storage */
    int64_t offset;
    int ndim;
    int64_t *geom; /* ndim sizes then ndim strides */
} gt_tensor_ent;

/* How the version counters of an op's written arguments move. */
enum {
    BUMP_AFTER = 0,   /* PyTorch's ADInplaceOrView kernel bumps after we return */
    BUMP_FOREACH = 1, /* a _foreach_ op: its per-tensor ops bump only when no
                       * dispatch mode runs, so the recorder bumps each written
                       * tensor whose version did not move (at the next op) */
    BUMP_NONE = 2,    /* no ADInplaceOrView kernel (fused kernels): PyTorch does
                       * not bump; whatever moved is observed at the next op */
};

typedef struct {
    gt_id name;
    unsigned char *wpos; /* wpos[i]: schema argument i is written (1), or
                          * written though the schema does not say so (2) */
    Py_ssize_t nwpos;
    int bump;            /* BUMP_* */
    int kw;              /* BUMP_NONE writes that moved no counter are kernel
                          * writes (kwrites.c) */
    int when;            /* kw: the bool argument the unmarked writes need, or -1 */
    PyObject *when_name; /* its name (for kwargs), or NULL */
    PyObject *wnames;    /* tuple of written argument names (for kwargs) */
    int view_arg;        /* schema position an output aliases, -1 for none */
    int is_detach;       /* aten::detach: maybe a shallow copy (.data) */
    int is_query;        /* a size/stride/layout query (is_metadata_query) */
    PyObject *call;      /* what func(*args, **kwargs) calls: its C++ op, or func */
} gt_opmeta;

typedef struct {
    gt_id name;
    int is_acc;      /* AccumulateGrad */
    int is_custom;   /* a custom autograd.Function's node (saved_tensors) */
    PyObject *saved; /* tuple of (attribute, slot) */
    int pruned;      /* saved has lost the slots that hold no tensors */
} gt_nodetype;

/* A tensor argument or output of an op, found by collect(). */
typedef struct {
    PyObject *t;      /* borrowed from the op's arguments or result */
    gt_tensor_ent *e; /* its entry (borrowed), or NULL when untracked */
    int64_t ver;      /* its version before the op */
    int written;      /* the schema marks it as written */
    int schema_pos;   /* schema position of its argument, -1 for kwargs */
} argref;

typedef struct {
    argref *v;
    size_t n, cap;
} argvec;

/* Scratch space of one op in flight: taken from the recorder's spare list on
 * entry and given back on exit, so that ops of any size (and ops of other
 * threads while the GIL is released inside one) never share it and a steady
 * run allocates nothing. */
typedef struct gt_scratch {
    argvec in, out;
    PyFrameObject **frames; /* capture_stack_from's frames */
    size_t frames_cap;
    struct gt_scratch *next;
} gt_scratch;

/* A torch.utils.checkpoint(use_reentrant=False) call in progress: the nodes
 * made inside it save through saved-tensor hooks (reading them would run the
 * recomputation), and unpacking any of them in backward first unpacks the
 * call's inputs, with PyTorch's version check. */
typedef struct {
    int64_t seq;       /* the call's ops row */
    size_t n;          /* its tensor inputs */
    gt_id *tensors;    /* their tensors.id (0: not recorded) */
    int64_t *versions; /* their versions at the call */
    int64_t *nbytes;
} gt_region;

typedef struct gt_pyrec {
    GT_PROTO_HEAD;   /* r, on, active, failed, forked, data_orig: protocol.h */
    int busy;        /* ops in flight (inside dispatch, any thread) */
    int in_backward; /* depth of recorded backward calls */
    int has_seqnr;   /* nodes have _sequence_nr() */
    int has_untyped; /* tensors have untyped_storage() */
    int64_t errors;  /* bookkeeping errors cleared */
    PyObject *tensor_type;
    PyObject *op_meta_fn;   /* func -> (name, written positions, wnames, view_arg,
                             * call, bump) */
    PyObject *increment;    /* torch._C._increment_version, or None */
    PyObject *saved_fn;     /* node type -> tuple of (attr, slot) */
    PyObject *grad_enabled; /* torch.is_grad_enabled */
    PyObject *via_autograd; /* () -> True when the op came through autograd */
    PyObject *getline;      /* linecache.getline */
    PyObject *hidden;       /* tuple of path prefixes never put in stacks */
    PyObject *engine;       /* tuple of path prefixes of the engine (torch) */
    PyObject *key;          /* key of our node id in grad_fn.metadata */
    PyObject *keep;         /* list: objects whose address keys a cache */
    PyObject *retry;        /* list of (node, id, op, pairs) to read again */
    PyObject *module_type;  /* torch.nn.Module, or NULL (looked up once) */
    PyObject *current_node; /* torch._C._current_autograd_node or NULL */
    PyObject *last_exec;    /* the node the last backward op ran under */
    int looked_up;          /* module_type and current_node looked up */
    gt_id cur_backward;     /* the innermost recorded backward call */
    gt_id last_exec_id;     /* its last node_execs row's node */
    gt_map byid; /* tensor id -> gt_tensor_ent* (the entries alive, borrowed) */
    gt_map tensors, storages, ops, stacks, frames, codes, dtypes, threads, types;
    gt_map modpaths;         /* (outer module, its modpath, module) -> modpath* */
    struct modpath *modroot; /* "": a module under no other (not cached) */
    uint32_t next_modpath;
    gt_id next_tensor, next_storage, next_node;
    PyFrameObject *last_site, *last_user; /* capture_stack's last answer, held
                                           * only while the frame surely runs */
    uintptr_t last_site_addr;             /* the last op's site, never dereferenced */
    uintptr_t names_miss; /* user frame whose names matched nothing (address
                           * only: holding it would keep its locals alive) */
    int names_miss_lasti;
    int last_lasti;
    gt_id last_stack;
    PyObject **pending; /* owned: outputs and mutated args of the last op */
    Py_ssize_t npending;
    size_t cappending;
    int64_t pending_seq;
    gt_id pending_thread;
    int flushing;        /* inside flush_pending */
    PyObject *unbumped;  /* list of (tensor, version before) of BUMP_FOREACH ops */
    gt_map done;         /* (node, output_nr) written by the current flush */
    uint64_t *done_keys; /* their keys, to take them out of `done` after it */
    size_t ndone_keys, capdone_keys;
    gt_scratch *spare;  /* scratch of no op in flight */
    int calls;          /* call_begin without call_end yet */
    int check_saved;    /* GT_FP_*: how saved tensors are fingerprinted */
    PyObject *fp;       /* dict: node id -> list of (attr, index, saved seq,
                         * hash and bytes at save) */
    int quiet;          /* our own reads run ops (unpacking a saved output):
                         * they pass through unrecorded */
    gt_region *regions; /* checkpoint regions, innermost last */
    size_t nregions, capregions;
    /* torch.func: the ops inside a transform reach the mode unwrapped, while
     * the graph and its saved tensors hold functorch's wrappers of them */
    PyObject *ft_wrapped; /* torch._C._functorch.is_functorch_wrapped_tensor */
    PyObject *ft_unwrap;  /* get_unwrapped, or NULL */
    int ft_looked;        /* the two looked up */
    int ft_seen;          /* a transform ran: unwrap saved tensors and names */
    int ft_now;           /* the op in flight writes under a transform */
    int stack_func;       /* the last stack captured runs under a transform */
} gt_pyrec;

typedef struct {
    PyTypeObject *recorder_type;
    PyTypeObject *ent_type;
    PyObject *s_version, *s_grad_fn, *s_metadata, *s_next_functions, *s_output_nr,
        *s_data_ptr, *s_storage_offset, *s_shape, *s_stride, *s_dtype, *s_requires_grad,
        *s_is_leaf, *s_is_view, *s_base, *s_variable, *s_sequence_nr, *s_untyped_storage,
        *s_storage, *s_cdata, *s_nbytes, *s_device, *s_element_size, *s_strip,
        *s_get_device, *s_functorch_dir, *s_functorch_src;
} modstate;

static inline modstate *state_of_type(PyTypeObject *tp)
{
    return (modstate *)PyType_GetModuleState(tp);
}

#define STATE(self) state_of_type(Py_TYPE(self))

/* Clear a bookkeeping error: it must never reach the recorded program. */
static inline void swallow(gt_pyrec *self)
{
    if (PyErr_Occurred()) {
        PyErr_Clear();
        self->errors++;
    }
}

/* Check a recorder result; on a write failure stop recording with one
 * warning. Returns rc. */
static inline int ck(gt_pyrec *self, int rc)
{
    if (rc < 0 && !self->failed && self->r && gt_recorder_failed(self->r)) {
        self->failed = 1;
        self->active = 0;
        /* library messages carry no program name: it is added here, once */
        PySys_WriteStderr("gradtrace: %s\n", gt_recorder_errmsg(self->r));
    }
    return rc;
}

/* The per-op path's own gt_proto_recording, without the recorder's lock:
 * ck keeps `failed` in step with the handle. */
static inline int recording(gt_pyrec *self)
{
    return self->r && self->active && !self->failed && !self->forked;
}

enum { CODE_USER = 1, CODE_ENGINE = 2, CODE_HIDDEN = 3 };

/* CODE_FUNC flags the code of torch.func's transforms (torch/_functorch/;
 * functorch/_src/ in 1.13): a user frame they call runs under a transform.
 * CODE_SELF: the code's first argument is `self` (a method: its frame may
 * run an nn.Module's code, stacks.module). */
enum { CODE_KIND = 0xf, CODE_FUNC = 0x10, CODE_SELF = 0x20 };

/* util.c */
int64_t gt__long_attr(PyObject *o, PyObject *name, int64_t dflt, gt_pyrec *self);
int64_t gt__long_call(PyObject *o, PyObject *name, int64_t dflt, gt_pyrec *self);
int gt__truth_attr(PyObject *o, PyObject *name, gt_pyrec *self);
gt_id gt__intern_str(gt_pyrec *self, const char *s);
int gt__keep(gt_pyrec *self, PyObject *o);
gt_id gt__current_thread(gt_pyrec *self);
gt_scratch *gt__scratch_take(gt_pyrec *self);
void gt__scratch_give(gt_pyrec *self, gt_scratch *sc);
void gt__scratch_free_all(gt_pyrec *self);
int gt__argvec_push(argvec *a, argref r);

/* functorch.c */
int gt__ft_active(gt_pyrec *self);
PyObject *gt__ft_inner(gt_pyrec *self, PyObject *t);

/* stack.c */
int gt__code_kind(gt_pyrec *self, PyCodeObject *co);
gt_id gt__capture_stack_from(gt_pyrec *self, PyFrameObject *start,
                             PyFrameObject **user /* OUT */);
PyFrameObject *gt__current_site(gt_pyrec *self, int *lasti);
void gt__release_frames(gt_pyrec *self);
gt_id gt__capture_stack(gt_pyrec *self, PyFrameObject *site, int lasti,
                        PyFrameObject **user);
gt_id gt__capture_stack_here(gt_pyrec *self, PyFrameObject **user);

/* ent.c */
void gt__storage_release(gt_pyrec *self, gt_storage_ent *st);
/* Take e off its storage's list and release the storage. Can't fail. */
void gt__ent_unlink(gt_pyrec *self, gt_tensor_ent *e);
void gt__ent_forget(gt_pyrec *self, gt_tensor_ent *e);
extern PyType_Spec gt__ent_spec;

/* tensor.c */
gt_id gt__dtype_of(gt_pyrec *self, PyObject *t, PyObject *dtype, int *itemsize);
int gt__read_geom(gt_pyrec *self, PyObject *t, int *ndim, int64_t **geom);
int64_t gt__read_version(gt_pyrec *self, PyObject *t);
uint64_t gt__storage_key(gt_pyrec *self, PyObject *t, int64_t offset, int itemsize);
gt_tensor_ent *gt__lookup(gt_pyrec *self, PyObject *t);
void gt__observe(gt_pyrec *self, gt_tensor_ent *e, int64_t version);
void gt__write_tensor(gt_pyrec *self, gt_tensor_ent *e, PyObject *t, int is_leaf);
gt_tensor_ent *gt__see_tensor(gt_pyrec *self, PyObject *t, int64_t created_by,
                              gt_tensor_ent *via, int64_t *version);
gt_tensor_ent *gt__see_inner(gt_pyrec *self, PyObject *t, int64_t *version);
void gt__check_storage(gt_pyrec *self, gt_tensor_ent *e, PyObject *t, int64_t op,
                       gt_id bid, gt_id stack, int report);

/* node.c */
gt_nodetype *gt__node_type(gt_pyrec *self, PyTypeObject *tp);
gt_id gt__discover(gt_pyrec *self, PyObject *root, int64_t op, gt_id thread, int *is_new);
void gt__clear_pending(gt_pyrec *self);
void gt__flush_pending(gt_pyrec *self);
void gt__note_exec(gt_pyrec *self);
gt_id gt__node_of(gt_pyrec *self, PyObject *t);

/* saved.c */
void gt__fingerprint_use(gt_pyrec *self, PyObject *node, gt_id nid);
PyObject *gt__record_saved_all(gt_pyrec *self, gt_id nid, int64_t op, PyObject *node,
                               PyObject *pairs, gt_nodetype *nt);
void gt__region_saved(gt_pyrec *self, gt_region *rg, gt_id nid);
void gt__region_pop(gt_pyrec *self, int64_t seq);
void gt__region_push(gt_pyrec *self, int64_t seq, argvec *in);
void gt__watch_all(gt_pyrec *self, gt_id bid, gt_id stack);

/* names.c */
void gt__record_names(gt_pyrec *self, PyFrameObject *uf, int64_t seq, PyObject *t,
                      gt_tensor_ent *te);
void gt__lookup_torch(gt_pyrec *self);
void gt__bind_names(gt_pyrec *self, PyFrameObject *uf, int64_t seq);

/* dispatch.c */
void gt__bump_foreach(gt_pyrec *self);

/* kwrites.c */
/* m's kernel-write fields from op_meta's kw. Can't fail (a malformed kw is
 * none; an exception may be left set: swallow it). */
void gt__kw_meta(gt_opmeta *m, PyObject *kw);
/* 1 if the op's unmarked writes happen with these arguments: no condition,
 * or its bool argument is True (positional, else by name in kwargs). */
int gt__kw_when(const gt_opmeta *m, PyObject *args, PyObject *kwargs);
/* After op `seq` returned: a kernel write of written argument a if its
 * version did not move. */
void gt__kw_after(gt_pyrec *self, const gt_opmeta *m, const argref *a, int64_t seq);
/* Module constants KERNEL_WRITES, the kernel-write list as a tuple of (op,
 * "argument,argument", when, reason), and WRITES_NO_ELEMENT, a tuple of op
 * names. Returns 0, or -1 with an exception. */
int gt__kw_module_add(PyObject *m);
int gt__collect(gt_pyrec *self, PyObject *v, int written, int pos, argvec *a, int depth);
PyObject *gt__rec_dispatch(PyObject *op, PyObject *const *argv, Py_ssize_t argc);

/* recorder.c */
extern PyType_Spec gt__rec_spec;

#endif /* GT_DISPATCH_STATE_H */

/* The engine adapter's consumer: capture records to recorder calls; see
 * fold.h. */
#include "fold.h"

#include "grow.h"
#include "gt_capture.h"
#include "gtmap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct fvc {
    gt_id id;         /* id of the first tensor seen with the counter */
    int64_t expected; /* the value we believe it has */
    gt_id last;       /* the latest tensor seen with it (saved outputs) */
    /* the cut count (cut_epoch) when id's and last's rows were last
     * written: a dead tensor's row is known to be there only while no
     * window cut came since */
    uint32_t id_epoch, last_epoch;
    const void *storage;
    int refs;
    uint64_t mark; /* stamp of the op whose versions met it last (on_versions) */
} fvc;

/* dimensions of a tensor whose row is kept in its entry (else on the heap) */
#define GT__FOLD_INLINE 4

typedef struct ftensor {
    /* its row (a copy, kept to write it again after a window cut dropped
     * it); an output's row is written at its next sighting (deferred) */
    gt_tensor_info *row;
    int deferred;
    uint32_t wepoch; /* cut_epoch when the row was written (or made) */
    int64_t nbytes;  /* its storage's row, to write it again */
    gt_id device;
    const void *impl;
    int weak;     /* holds a weak reference on impl (GT_CAPT_WEAK) */
    int saved;    /* a node saved it: a storage swap is reported */
    gt_id sid;    /* the storage id it was last seen on */
    int64_t seen; /* the event seq it was last seen at */
    gt_id id;
    int refs; /* the map's, plus each lane op input holding it */
    const void *vc;
    const void *storage;
    fvc *v;
    /* the row and its geometry in place for up to GT__FOLD_INLINE dims */
    gt_tensor_info row_in;
    int64_t geom_in[2 * GT__FOLD_INLINE];
} ftensor;

typedef struct in_ent {
    ftensor *t;
    uint32_t version;
    int written;
    int unmarked; /* GT_CAPT_UNMARKED: its change is seen later, not the op's */
    int nobump;   /* GT_CAPT_NOBUMP: a kernel write if its counter did not move */
} in_ent;

/* A call into user code in progress on a lane (gt_capture_call_begin). A
 * non-reentrant checkpoint's (region) nodes save through saved-tensor hooks:
 * what unpacking them checks is the call's inputs, recorded as each node's
 * checkpoint_input[i] (as the dispatch adapter records them). */
typedef struct fcall {
    uint64_t stamp;
    int64_t seq;
    int region;
    int n, cap; /* the region's inputs: n of cap allocated (kept for reuse) */
    gt_id *tensors;
    int64_t *versions, *nbytes;
} fcall;

/* Per-lane state: the op being folded. */
typedef struct flane {
    gt_id thread;
    int64_t op;     /* recorder seq of the lane's current op, 0 none */
    gt_id opstack;  /* its stack */
    uint64_t stamp; /* its stamp */
    int nin, nmut, nout;
    in_ent *in; /* the op's tensor inputs, nin of cap_in allocated */
    size_t cap_in;
    ftensor **pending; /* outputs whose rows wait for the next op (held) */
    size_t npending, cappending;
    fcall *calls; /* calls into user code in progress, innermost last */
    int ncalls;
    size_t cap_calls;
    int call_end;      /* folding a call's outputs (GT_CAP_CALL_END) */
    gt_id region_node; /* the last node made in a region */
    int region_done;   /* its checkpoint inputs are recorded */
    /* a text record (GT_CAP_TEXTF_MORE) being put together: its struct,
     * then its text so far, text_len bytes in all; text_head: the
     * struct's bytes, 0 when none is */
    unsigned char *text;
    size_t text_len, text_cap, text_head;
} flane;

struct gt_fold {
    gt_recorder *r;
    pthread_mutex_t mu; /* one drain at a time */
    pthread_mutex_t wmu;
    pthread_cond_t wcv;
    pthread_t thread;
    int running, stop;
    unsigned period_ms;
    gt_map strs;       /* const char* -> string id */
    gt_map tensors;    /* TensorImpl* -> ftensor* */
    gt_map byid;       /* tensor id -> ftensor* (the entries alive; kept
                        * only when windowed: named() asks it after a cut) */
    int windowed;      /* the recorder cuts windows (keep_last) */
    gt_map vcs;        /* counter* -> fvc* */
    gt_map storages;   /* StorageImpl* -> storage id */
    gt_map stor_first; /* StorageImpl* -> first tensor id recorded on it */
    gt_map stacks;     /* stack key -> stack id */
    gt_map threads;    /* os tid -> thread id */
    gt_map fps;        /* (node id, slot, FP_*) -> the fingerprint at save */
    gt_id next_tensor, next_storage;
    gt_id *bwd; /* open backward calls, innermost last */
    size_t nbwd, bwd_cap;
    size_t bwd_lost;          /* innermost calls not held for lack of memory */
    gt_id bwd_stack;          /* the stack of the latest backward call */
    int rc;                   /* first recorder error */
    int warned;               /* the one warning about it was printed */
    int64_t refused;          /* calls the recorder refused (bookkeeping slips) */
    const void *weak_pending; /* the weak reference of the record being folded */
    size_t since_sweep;       /* tensors recorded since dead ones were swept */
    /* entries given back, for reuse (linked through ->v): a training step
     * makes and drops the same number of tensors every time */
    ftensor *free_t;
    fvc *free_v;
    /* str_id's last answers by pointer (the capture's strings are interned:
     * one pointer, one text) */
    struct {
        const char *s;
        gt_id id;
    } scache[256];
    int64_t last_tid; /* thread_id's and stack_id's last answers */
    gt_id last_thread, last_stack;
    uint32_t last_skey;
    /* a drain holds the recorder (gt_recorder_hold) over runs of records;
     * the weak references let go meanwhile wait in wrel, released after
     * it lets go (the last one frees a TensorImpl: no torch code runs
     * under the recorder's mutex) */
    int holding;
    const void **wrel;
    size_t nwrel, cap_wrel;
};

/* Records folded under one hold of the recorder: other writers (names,
 * the Python side) wait at most that long. */
#define GT__FOLD_HOLD 256

/* A recorder result: a write failure stops recording (see drain); a
 * refused call (GT_EINVAL: say a row seen twice) is counted and skipped. */
static int ck(gt_fold *f, int rc)
{
    if (rc < 0 && !f->rc && gt_recorder_failed(f->r))
        f->rc = rc;
    else if (rc < 0)
        f->refused++;
    return rc;
}

static gt_id str_id(gt_fold *f, const char *s)
{
    if (!s)
        return 0;
    size_t slot = ((uintptr_t)s >> 3) & 255;
    if (f->scache[slot].s == s)
        return f->scache[slot].id;
    uint64_t *v = gt_map_get(&f->strs, (uintptr_t)s, 0, 0);
    gt_id id = 0;
    if (v) {
        id = (gt_id)*v;
    } else {
        if (ck(f, gt_intern_string(f->r, s, strlen(s), &id)) < 0)
            return 0;
        if (gt_map_put(&f->strs, (uintptr_t)s, 0, 0, (uint64_t)id) < 0)
            return id;
    }
    f->scache[slot].s = s;
    f->scache[slot].id = id;
    return id;
}

/* A zeroed entry, reused when one was given back. */
static ftensor *ftensor_alloc(gt_fold *f)
{
    ftensor *t = f->free_t;
    if (!t)
        return calloc(1, sizeof *t);
    f->free_t = (ftensor *)t->v;
    memset(t, 0, sizeof *t);
    return t;
}

static void ftensor_free(gt_fold *f, ftensor *t)
{
    if (t->row != &t->row_in)
        free(t->row);
    t->v = (fvc *)f->free_t;
    f->free_t = t;
}

static fvc *fvc_alloc(gt_fold *f)
{
    fvc *v = f->free_v;
    if (!v)
        return calloc(1, sizeof *v);
    f->free_v = (fvc *)(uintptr_t)v->storage;
    memset(v, 0, sizeof *v);
    return v;
}

static gt_id thread_id(gt_fold *f, int64_t tid)
{
    if (f->last_thread && tid == f->last_tid)
        return f->last_thread;
    uint64_t *v = gt_map_get(&f->threads, (uint64_t)tid, 0, 0);
    gt_id id = 0;
    if (v) {
        id = (gt_id)*v;
    } else {
        if (ck(f, gt_intern_thread(f->r, tid, NULL, &id)) < 0)
            return 0;
        if (gt_map_put(&f->threads, (uint64_t)tid, 0, 0, (uint64_t)id) < 0)
            return id;
    }
    f->last_tid = tid;
    f->last_thread = id;
    return id;
}

/* The stack id of a stack key (0: none, or not described yet). A key names
 * one stack for good: the last answer is kept (ops come in runs from one
 * line). */
static gt_id stack_id(gt_fold *f, uint32_t key)
{
    if (!key)
        return 0;
    if (key == f->last_skey)
        return f->last_stack;
    uint64_t *v = gt_map_get(&f->stacks, key, 0, 0);
    if (!v)
        return 0;
    f->last_skey = key;
    f->last_stack = (gt_id)*v;
    return f->last_stack;
}

static gt_id cur_backward(gt_fold *f)
{
    return f->nbwd && !f->bwd_lost ? f->bwd[f->nbwd - 1] : 0;
}

static void vc_unref(gt_fold *f, fvc *v, const void *key)
{
    if (v && --v->refs == 0) {
        uint64_t *cur = gt_map_get(&f->vcs, (uintptr_t)key, 0, 0);
        if (cur && (fvc *)(uintptr_t)*cur == v)
            gt_map_del(&f->vcs, (uintptr_t)key, 0, 0);
        v->storage = f->free_v; /* the free list's link */
        f->free_v = v;
    }
}

/* Let go of a weak reference on impl: now, or after the hold (wrel). */
static void weak_release(gt_fold *f, const void *impl)
{
    if (f->holding && GT_ALLOC_GROW(f->wrel, f->nwrel + 1, f->cap_wrel, 64) == 0)
        f->wrel[f->nwrel++] = impl;
    else
        gt_capture_weak_release(impl); /* out of memory: at once */
}

/* Let go of the recorder's hold, then of the weak references kept meanwhile. */
static void unhold(gt_fold *f)
{
    if (!f->holding)
        return;
    f->holding = 0;
    ck(f, gt_recorder_release(f->r));
    for (size_t i = 0; i < f->nwrel; i++)
        gt_capture_weak_release(f->wrel[i]);
    f->nwrel = 0;
}

static void row_write(gt_fold *f, ftensor *t, int again);

static void tensor_drop(gt_fold *f, ftensor *t)
{
    if (t && --t->refs == 0) {
        if (t->deferred)
            row_write(f, t, 0);
        if (f->windowed)
            gt_map_del(&f->byid, (uint64_t)t->id, 0, 0);
        vc_unref(f, t->v, t->vc);
        if (t->weak)
            weak_release(f, t->impl);
        ftensor_free(f, t);
    }
}

/* Forget the tensors that died and that no record still to fold names (ours
 * is their last weak reference): their addresses can be reused only once
 * given back. Every record of a tensor holds a weak reference, and so does
 * its entry: an address known here is the same tensor. Amortised: runs when
 * as many tensors were recorded since the last sweep as half the map holds
 * (before the new one is added). */
static void sweep_dead(gt_fold *f)
{
    if (++f->since_sweep < 4096 || f->since_sweep < f->tensors.len / 2)
        return;
    f->since_sweep = 0;
    size_t n = 0;
    const void **dead = malloc(sizeof *dead * (f->tensors.len ? f->tensors.len : 1));
    if (!dead)
        return;
    for (size_t i = 0; i < f->tensors.cap; i++) {
        if (!f->tensors.slots[i].used)
            continue;
        ftensor *t = (ftensor *)(uintptr_t)f->tensors.slots[i].value;
        if (t->weak && gt_capture_weak_forgettable(t->impl))
            dead[n++] = t->impl;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t *v = gt_map_get(&f->tensors, (uintptr_t)dead[i], 0, 0);
        if (!v)
            continue;
        ftensor *t = (ftensor *)(uintptr_t)*v;
        gt_map_del(&f->tensors, (uintptr_t)dead[i], 0, 0);
        tensor_drop(f, t);
    }
    free(dead);
}

/* Drop the lane's hold on its last op's inputs. */
static void lane_reset(gt_fold *f, flane *l)
{
    for (int i = 0; i < l->nin; i++)
        tensor_drop(f, l->in[i].t);
    l->nin = l->nmut = l->nout = 0;
}

static ftensor *tensor_get(gt_fold *f, const void *impl)
{
    uint64_t *v = gt_map_get(&f->tensors, (uintptr_t)impl, 0, 0);
    return v ? (ftensor *)(uintptr_t)*v : NULL;
}

/* The live entry of impl if it still has counter vc (storage may change:
 * set_ and resize_ move a tensor to a new storage). */
static ftensor *tensor_known(gt_fold *f, const void *impl, const void *vc)
{
    ftensor *t = tensor_get(f, impl);
    return t && t->vc == vc ? t : NULL;
}

/* The flight recorder's cut count as the maps keep it (24 bits). */
static uint32_t cut_epoch(gt_fold *f)
{
    return f->windowed ? (uint32_t)(gt_recorder_cuts(f->r) & 0xffffff) : 0;
}

/* A storages map value: the id in the low 40 bits, the cut count when its
 * row was written above them (a flight recorder's cut may have dropped the
 * row since: gt_recorder_cuts). */
static uint64_t storage_val(gt_id id, uint32_t epoch)
{
    return (uint64_t)id | (uint64_t)epoch << 40;
}

static gt_id storage_val_id(uint64_t v)
{
    return (gt_id)(v & ((UINT64_C(1) << 40) - 1));
}

/* Write storage id's row if the map's value v (NULL: none) does not say it
 * is there since the last cut, and note it in v. */
static void storage_row(gt_fold *f, uint64_t *v, gt_id id, int64_t nbytes, gt_id device)
{
    uint32_t epoch = cut_epoch(f);
    if (v && storage_val_id(*v) == id && *v >> 40 == epoch)
        return;
    ck(f, gt_storage(f->r, id, nbytes, device));
    if (v && storage_val_id(*v) == id)
        *v = storage_val(id, epoch);
}

static gt_id storage_of(gt_fold *f, const gt_cap_tensor *c, int fresh)
{
    if (!c->storage)
        return 0;
    int64_t nbytes = c->nbytes < 0 ? 0 : c->nbytes;
    int added;
    uint64_t *v = gt_map_upsert(&f->storages, (uintptr_t)c->storage, 0, 0, &added);
    if (v && !added && !fresh) {
        gt_id id = storage_val_id(*v);
        if (*v >> 40 != cut_epoch(f))
            storage_row(f, v, id, nbytes, str_id(f, c->device));
        return id;
    }
    gt_id id = ++f->next_storage;
    ck(f, gt_storage(f->r, id, nbytes, str_id(f, c->device)));
    if (v)
        *v = storage_val(id, cut_epoch(f));
    return id;
}

/* t's storage row, written again if a cut may have dropped it. */
static void storage_again(gt_fold *f, ftensor *t)
{
    if (!t->sid)
        return;
    uint64_t *v =
        t->storage ? gt_map_get(&f->storages, (uintptr_t)t->storage, 0, 0) : NULL;
    storage_row(f, v, t->sid, t->nbytes, t->device);
}

static void tensor_touch(gt_fold *f, ftensor *t);

/* id (a tensor a row written now names) if its row is there: a tensor
 * alive here has its row written again if a cut may have dropped it; a
 * dead one's row is there if no cut came since it was written (at cut
 * count `epoch`, UINT32_MAX unknown). 0 if it may be gone. */
static gt_id named(gt_fold *f, gt_id id, uint32_t epoch)
{
    if (!id || !f->windowed)
        return id; /* no cut ever drops a row */
    uint64_t *p = gt_map_get(&f->byid, (uint64_t)id, 0, 0);
    if (p) {
        tensor_touch(f, (ftensor *)(uintptr_t)*p);
        return id;
    }
    return !gt_recorder_cuts(f->r) || epoch == cut_epoch(f) ? id : 0;
}

/* The cut count when tensor id's row was last written, as v knows it. */
static uint32_t vc_epoch(const fvc *v, gt_id id)
{
    if (v && id == v->last)
        return v->last_epoch;
    if (v && id == v->id)
        return v->id_epoch;
    return UINT32_MAX;
}

/* Write t's row: the first time (again 0; a deferred output's at its next
 * sighting) or again after a window cut dropped it (again 1: INSERT OR
 * IGNORE). If a cut came since t was made or written, what the row names
 * may be gone: its storage is written again, its base named only if its
 * row is there, the op that made it only if the window kept it. */
static void row_write(gt_fold *f, ftensor *t, int again)
{
    uint32_t e = cut_epoch(f);
    gt_tensor_info ti = *t->row;
    int cut = t->wepoch != e;
    t->wepoch = e; /* first: a chain of bases ends here */
    t->deferred = 0;
    if (cut) {
        storage_again(f, t);
        ti.storage = t->sid;
        ti.alias_of = named(f, ti.alias_of, vc_epoch(t->v, ti.alias_of));
        if (ti.created_by > 0 && ti.created_by < gt_recorder_window_start(f->r))
            ti.created_by = 0;
        if (t->v && t->v->id != t->id)
            named(f, t->v->id, UINT32_MAX); /* the counter's first tensor */
    }
    ck(f, again ? gt_tensor_again(f->r, &ti) : gt_tensor(f->r, &ti));
    if (t->v && t->v->id == t->id)
        t->v->id_epoch = e;
    if (t->v && t->v->last == t->id)
        t->v->last_epoch = e;
}

/* t is named by a row written now: its own row is written again if a
 * window cut may have dropped it (a deferred row is written later). */
static void tensor_touch(gt_fold *f, ftensor *t)
{
    if (t && t->row && !t->deferred && t->wepoch != cut_epoch(f))
        row_write(f, t, 1);
}

/* The version counter a tensor first seen now shares, or NULL: that of
 * share (an input of its op with the same counter, a view), or, for a
 * tensor first seen as an input (created_by 0), the known counter at c->vc
 * if it is on the same storage (a view or detach of a known tensor).
 * *alias gets the tensor it aliases, when that one's row is there. This
 * function can't fail. */
static fvc *counter_shared(gt_fold *f, const gt_cap_tensor *c, int64_t created_by,
                           ftensor *share, gt_id *alias)
{
    if (share && share->v) {
        *alias = named(f, share->id, UINT32_MAX);
        return share->v;
    }
    if (created_by || !c->vc)
        return NULL;
    uint64_t *p = gt_map_get(&f->vcs, (uintptr_t)c->vc, 0, 0);
    fvc *o = p ? (fvc *)(uintptr_t)*p : NULL;
    if (!o || o->storage != c->storage)
        return NULL;
    *alias = named(f, o->last, o->last_epoch);
    if (!*alias)
        *alias = named(f, o->id, o->id_epoch);
    return o;
}

/* A new version counter for c->vc, tensor t its first, noted in f->vcs
 * (an older counter at that address is dead). NULL when out of memory. */
static fvc *counter_new(gt_fold *f, const ftensor *t, const gt_cap_tensor *c)
{
    fvc *v = fvc_alloc(f);
    if (!v)
        return NULL;
    v->id = t->id;
    v->id_epoch = cut_epoch(f);
    v->expected = c->version;
    v->storage = c->storage;
    v->refs = 1;
    int added;
    uint64_t *p = gt_map_upsert(&f->vcs, (uintptr_t)c->vc, 0, 0, &added);
    if (p)
        *p = (uintptr_t)v;
    return v;
}

/* Note tensor t as the first on storage sid (c->storage) when it is the
 * first seen there or the storage is fresh, and return t's alias: `alias`,
 * or, for a tensor made by no op with none known (x.data), the first tensor
 * recorded on that storage. This function can't fail (a map that cannot
 * grow notes nothing). */
static gt_id storage_first(gt_fold *f, const gt_cap_tensor *c, const ftensor *t,
                           gt_id alias, int64_t created_by, int fresh_storage)
{
    if (!c->storage)
        return alias;
    if (!alias && !created_by) {
        /* first seen on a storage another tensor uses: an alias of the
         * first tensor recorded there */
        uint64_t *p = gt_map_get(&f->stor_first, (uintptr_t)c->storage, 0, 0);
        if (p && (gt_id)(*p >> 32) == t->sid)
            alias = named(f, (gt_id)(*p & 0xffffffffu), UINT32_MAX);
    }
    int added;
    uint64_t *p = gt_map_upsert(&f->stor_first, (uintptr_t)c->storage, 0, 0, &added);
    if (p && (added || fresh_storage))
        *p = (uint64_t)t->sid << 32 | (uint64_t)(t->id & 0xffffffffu);
    return alias;
}

/* Keep t's row ti, its geometry copied: an output's (created_by) waits for
 * the tensor's next sighting (requires_grad may be set after its op
 * returns, as nn.Parameter does), any other is written now; a window cut
 * may drop it (tensor_touch). Out of memory, the row is written now and not
 * kept. This function can't fail. */
static void row_keep(gt_fold *f, ftensor *t, const gt_tensor_info *ti, int64_t created_by)
{
    size_t gn = (size_t)(ti->ndim ? ti->ndim : 1);
    t->row = gn <= GT__FOLD_INLINE ? &t->row_in
                                   : malloc(sizeof *t->row + sizeof(int64_t) * 2 * gn);
    if (!t->row) {
        ck(f, gt_tensor(f->r, ti));
        return;
    }
    int64_t *g = t->row == &t->row_in ? t->geom_in : (int64_t *)(t->row + 1);
    memcpy(g, ti->shape, sizeof *g * gn);
    memcpy(g + gn, ti->strides, sizeof *g * gn);
    *t->row = *ti;
    t->row->shape = g;
    t->row->strides = g + gn;
    if (created_by)
        t->deferred = 1;
    else
        row_write(f, t, 0);
}

/* Find t by its id (a window's cuts) and by its TensorImpl (c->impl),
 * dropping the dead tensor recorded at that address. This function can't
 * fail (a map that cannot grow does not find it). */
static void tensor_index(gt_fold *f, ftensor *t, const gt_cap_tensor *c)
{
    if (f->windowed)
        gt_map_put(&f->byid, (uint64_t)t->id, 0, 0, (uintptr_t)t);
    int added;
    uint64_t *p = gt_map_upsert(&f->tensors, (uintptr_t)c->impl, 0, 0, &added);
    if (p) {
        if (!added)
            tensor_drop(f, (ftensor *)(uintptr_t)*p); /* the dead one there */
        *p = (uintptr_t)t;
    }
}

/* Record a tensor first seen now. created_by: op seq for a new output;
 * share: an input of the op with the same counter (a view), or NULL;
 * base: an input on the same storage, or NULL. Returns the tensor, or NULL
 * when out of memory (nothing recorded). */
static ftensor *tensor_new(gt_fold *f, const gt_cap_tensor *c, const int64_t *geom,
                           int64_t created_by, ftensor *share, ftensor *base)
{
    static const int64_t none[1] = {0};
    sweep_dead(f);
    ftensor *t = ftensor_alloc(f);
    if (!t)
        return NULL;
    t->id = ++f->next_tensor;
    t->refs = 1;
    t->impl = c->impl;
    if (f->weak_pending && f->weak_pending == c->impl) {
        t->weak = 1; /* adopt the record's weak reference */
        f->weak_pending = NULL;
    }
    t->vc = c->vc;
    t->storage = c->storage;
    gt_id alias = 0;
    fvc *v = counter_shared(f, c, created_by, share, &alias);
    int shares = v != NULL;
    if (v) {
        v->refs++;
    } else if (c->vc && !(v = counter_new(f, t, c))) {
        ftensor_free(f, t);
        return NULL;
    }
    t->v = v;
    if (v) {
        v->last = t->id;
        v->last_epoch = cut_epoch(f);
    }
    if (!alias && base)
        alias = named(f, base->id, UINT32_MAX);
    int fresh_storage = created_by && !base && !share;
    int nd = geom ? c->ndim : 0;
    t->sid = storage_of(f, c, fresh_storage);
    t->seen = gt_recorder_seq(f->r);
    alias = storage_first(f, c, t, alias, created_by, fresh_storage);
    gt_tensor_info ti = {
        .id = t->id,
        .storage = t->sid,
        .dtype = str_id(f, c->dtype),
        .ndim = nd,
        .shape = nd ? geom : none,
        .strides = nd ? geom + nd : none,
        .storage_offset = c->offset,
        .requires_grad = (c->flags & GT_CAPT_REQGRAD) != 0,
        .is_leaf = (c->flags & GT_CAPT_LEAF) != 0,
        .created_by = created_by,
        .alias_of = alias,
        .shares_version = shares,
        .version_counter = v ? v->id : t->id,
    };
    t->nbytes = c->nbytes < 0 ? 0 : c->nbytes;
    t->device = str_id(f, c->device);
    t->wepoch = cut_epoch(f);
    row_keep(f, t, &ti, created_by);
    tensor_index(f, t, c);
    return t;
}

/* Write t's deferred row, with flags seen now if c is not NULL. */
static void row_flush(gt_fold *f, ftensor *t, const gt_cap_tensor *c)
{
    if (!t->deferred)
        return;
    if (c) {
        t->row->requires_grad = (c->flags & GT_CAPT_REQGRAD) != 0;
        t->row->is_leaf = (c->flags & GT_CAPT_LEAF) != 0;
    }
    row_write(f, t, 0);
}

static void pending_flush(gt_fold *f, flane *l)
{
    for (size_t i = 0; i < l->npending; i++) {
        row_flush(f, l->pending[i], NULL);
        tensor_drop(f, l->pending[i]);
    }
    l->npending = 0;
}

static void pending_add(flane *l, ftensor *t)
{
    if (GT_ALLOC_GROW(l->pending, l->npending + 1, l->cappending, 16) != 0)
        return; /* its row is written when it is dropped */
    t->refs++;
    l->pending[l->npending++] = t;
}

/* A version seen now that differs from what we believe: observed bump. */
static void observe(gt_fold *f, ftensor *t, uint32_t version)
{
    if (t->v && version != UINT32_MAX && (int64_t)version != t->v->expected) {
        ck(f, gt_version_bump(f->r, 0, t->id, version, 1, NULL));
        t->v->expected = version;
    }
}

/* An input's entry: known, or recorded now (first seen). */
/* t (known) is on the storage of c now: a tensor a node saved found on
 * other memory than before (`.data =`, which autograd does not see) is a
 * storage swap, noticed by op `op` (stack `stack`) or backward call `bid`;
 * report 0: the op's own change (set_); 2: the `.data =` itself, reported
 * whether a node saved t yet or not. */
static void see_storage(gt_fold *f, ftensor *t, const gt_cap_tensor *c, int64_t op,
                        gt_id bid, gt_id stack, int report)
{
    if (t->storage != c->storage) {
        gt_id sid = storage_of(f, c, 0);
        if (report > 1 || (report && t->saved)) {
            gt_swap_info si = {.tensor = t->id,
                               .old_storage = t->sid,
                               .new_storage = sid,
                               .op = op,
                               .backward = bid,
                               .last_seen = t->seen,
                               .stack = stack};
            ck(f, gt_storage_swap(f->r, &si));
        }
        t->storage = c->storage;
        t->sid = sid;
        t->nbytes = c->nbytes < 0 ? 0 : c->nbytes;
        t->device = str_id(f, c->device);
    }
    t->seen = gt_recorder_seq(f->r);
}

static ftensor *see_input(gt_fold *f, const gt_cap_tensor *c, const int64_t *geom,
                          int64_t op, gt_id bid, gt_id stack)
{
    ftensor *t = tensor_known(f, c->impl, c->vc);
    if (t) {
        row_flush(f, t, c);
        tensor_touch(f, t);
        see_storage(f, t, c, op, bid, stack, 1);
        observe(f, t, c->version);
        return t;
    }
    t = tensor_new(f, c, geom, 0, NULL, NULL);
    if (t && t->v && t->v->id != t->id)
        observe(f, t, c->version);
    return t;
}

/* Append e to the op's inputs (growing them: an op may take any number of
 * tensors). Returns 0, or -1 when out of memory (the input is not kept). */
static int lane_in_push(flane *l, in_ent e)
{
    if (GT_ALLOC_GROW(l->in, (size_t)l->nin + 1, l->cap_in, 64) != 0)
        return -1;
    l->in[l->nin++] = e;
    return 0;
}

/* A new innermost call (its region arrays kept from an earlier call at that
 * depth). NULL when out of memory. */
static fcall *lane_call_push(flane *l)
{
    size_t had = l->cap_calls;
    if (GT_ALLOC_GROW(l->calls, (size_t)l->ncalls + 1, l->cap_calls, 8) != 0)
        return NULL;
    memset(l->calls + had, 0, (l->cap_calls - had) * sizeof *l->calls);
    fcall *c = &l->calls[l->ncalls++];
    c->n = 0;
    return c;
}

/* Append a region input to call c. Returns 0, or -1 when out of memory. */
static int call_input_push(fcall *c, gt_id id, int64_t version, int64_t nbytes)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        gt_id *t = realloc(c->tensors, (size_t)cap * sizeof *t);
        if (t)
            c->tensors = t;
        int64_t *v = t ? realloc(c->versions, (size_t)cap * sizeof *v) : NULL;
        if (v)
            c->versions = v;
        int64_t *b = v ? realloc(c->nbytes, (size_t)cap * sizeof *b) : NULL;
        if (!b)
            return -1;
        c->nbytes = b;
        c->cap = cap;
    }
    c->tensors[c->n] = id;
    c->versions[c->n] = version;
    c->nbytes[c->n++] = nbytes;
    return 0;
}

/* Free what a lane's consumer holds (its entries let go by lane_reset). */
static void lane_free(flane *l)
{
    for (size_t i = 0; i < l->cap_calls; i++) {
        free(l->calls[i].tensors);
        free(l->calls[i].versions);
        free(l->calls[i].nbytes);
    }
    free(l->calls);
    free(l->in);
    free(l->pending);
    free(l->text);
}

static void on_op(gt_fold *f, flane *l, const gt_cap_op *r)
{
    gt_id stack = stack_id(f, r->stack);
    l->thread = thread_id(f, r->os_tid);
    gt_op_info oi = {
        .name = str_id(f, r->name),
        .phase = r->in_backward ? GT_PHASE_BACKWARD
                 : r->grad_mode ? GT_PHASE_FORWARD
                                : GT_PHASE_OTHER,
        .grad_mode = r->grad_mode,
        .thread = l->thread,
        .stack = stack,
    };
    int64_t seq = 0;
    if (!oi.name || ck(f, gt_op(f->r, &oi, &seq)) < 0)
        seq = 0;
    lane_reset(f, l);
    l->op = seq;
    l->opstack = stack;
    l->stamp = r->h.stamp;
    l->call_end = 0;
    fcall *c;
    if ((r->h.flags & GT_CAP_OPF_CALL) && seq && (c = lane_call_push(l)) != NULL) {
        c->stamp = r->h.stamp;
        c->seq = seq;
        c->region = (r->h.flags & GT_CAP_OPF_REGION) != 0;
    }
}

static fcall *lane_region(flane *l)
{
    for (int i = l->ncalls - 1; i >= 0; i--)
        if (l->calls[i].region)
            return &l->calls[i];
    return NULL;
}

/* Bytes of one element of a dtype named as torch does ("float32"). */
static int dtype_size(const char *d)
{
    if (!d)
        return 1;
    size_t n = strlen(d);
    int bits = 0;
    for (size_t i = 0; i < n; i++)
        if (d[i] >= '0' && d[i] <= '9')
            bits = bits * 10 + (d[i] - '0');
        else
            bits = 0;
    if (!bits)
        return 1; /* bool */
    if (!strncmp(d, "float8", 6) || !strncmp(d, "uint8", 5) || !strncmp(d, "int8", 4))
        return 1;
    return bits / 8 > 0 ? bits / 8 : 1;
}

static void on_call_end(gt_fold *f, flane *l, const gt_cap_call_end *r, int pop)
{
    int i = l->ncalls - 1;
    while (i >= 0 && l->calls[i].stamp != r->call)
        i--;
    if (i < 0)
        return;
    if (pop) {
        l->ncalls = i; /* and any call left open inside it */
        l->call_end = 0;
        return;
    }
    pending_flush(f, l);
    lane_reset(f, l);
    l->op = l->calls[i].seq;
    l->stamp = r->h.stamp;
    l->call_end = 1;
}

static void on_arg_body(gt_fold *f, flane *l, const gt_cap_arg *r);

static void on_arg(gt_fold *f, flane *l, const gt_cap_arg *r)
{
    f->weak_pending = (r->t.flags & GT_CAPT_WEAK) ? r->t.impl : NULL;
    on_arg_body(f, l, r);
    if (f->weak_pending)
        weak_release(f, f->weak_pending); /* not kept: known already */
    f->weak_pending = NULL;
}

static void on_arg_body(gt_fold *f, flane *l, const gt_cap_arg *r)
{
    const gt_cap_tensor *c = &r->t;
    const int64_t *geom = c->ndim ? (const int64_t *)(r + 1) : NULL;
    if (!l->op || r->h.stamp != l->stamp) {
        return;
    }
    if (r->role == GT_CAP_IN) {
        if (c->flags & GT_CAPT_UNDEF) {
            (void)lane_in_push(l, (in_ent){NULL, 0, 0, 0, 0});
            return;
        }
        ftensor *t = see_input(f, c, geom, l->op, 0, l->opstack);
        int w = (c->flags & GT_CAPT_WRITTEN) != 0;
        int pos = l->nin;
        if (t &&
            lane_in_push(l, (in_ent){t, c->version, w, (c->flags & GT_CAPT_UNMARKED) != 0,
                                     w && (c->flags & GT_CAPT_NOBUMP) != 0}) == 0)
            t->refs++;
        else if (!t)
            (void)lane_in_push(l, (in_ent){NULL, 0, 0, 0, 0});
        if (!t)
            return;
        fcall *cl = l->ncalls ? &l->calls[l->ncalls - 1] : NULL;
        if (cl && cl->region && cl->seq == l->op) {
            int64_t numel = 1;
            for (int d = 0; d < c->ndim && geom; d++)
                numel *= geom[d];
            (void)call_input_push(cl, t->id, c->version,
                                  geom || !c->ndim ? numel * dtype_size(c->dtype) : -1);
        }
        ck(f, gt_op_arg(f->r, l->op, GT_ROLE_INPUT, pos, t->id, c->version));
        if (w)
            ck(f, gt_op_arg(f->r, l->op, GT_ROLE_MUTATED, l->nmut++, t->id, c->version));
        return;
    }
    if (c->flags & GT_CAPT_UNDEF)
        return;
    ftensor *t = tensor_known(f, c->impl, c->vc);
    int is_input = 0;
    for (int i = 0; t && i < l->nin; i++)
        is_input |= l->in[i].t == t;
    if (t && is_input) {
        tensor_touch(f, t);
        see_storage(f, t, c, 0, 0, 0, 0); /* set_: the op's own change */
    }
    if (l->call_end && t) {
        /* a call's output is the output of an op inside it, or an input */
        row_flush(f, t, c);
        tensor_touch(f, t);
        observe(f, t, c->version);
        is_input = 1;
    }
    if (!is_input) {
        ftensor *share = NULL, *base = NULL;
        for (int i = 0; i < l->nin; i++) {
            ftensor *x = l->in[i].t;
            if (!x)
                continue;
            if (!share && c->vc && x->vc == c->vc)
                share = x;
            if (!base && c->storage && x->storage == c->storage)
                base = x;
        }
        t = tensor_new(f, c, geom, l->op, share, base);
        if (t && t->deferred)
            pending_add(l, t);
    }
    if (t)
        ck(f, gt_op_arg(f->r, l->op, GT_ROLE_OUTPUT, l->nout++, t->id, c->version));
}

/* The versions after the op of its inputs first..first + n - 1 (a
 * GT_CAP_VERS record, or the GT_CAP_END that ends the op): a change is a
 * bump of the op, once per counter (its first input with that counter); no
 * change of a counter the op may write without bumping is a kernel write,
 * unless the op ended by an exception. */
static void on_versions(gt_fold *f, flane *l, const gt_cap_end *r)
{
    pending_flush(f, l); /* the outputs of the lane's previous op */
    if (!l->op || r->h.stamp != l->stamp || r->first >= (uint32_t)l->nin)
        return;
    const uint32_t *after = (const uint32_t *)(r + 1);
    uint32_t n = r->n < (uint32_t)l->nin - r->first ? r->n : (uint32_t)l->nin - r->first;
    for (uint32_t k = 0; k < n; k++) {
        in_ent *e = &l->in[r->first + k];
        if (!e->t || !e->t->v)
            continue;
        /* an earlier input of this op had the counter (stamps are unique) */
        int dup = e->t->v->mark == l->stamp;
        e->t->v->mark = l->stamp;
        if (!dup && e->nobump && after[k] == e->version &&
            !(r->h.flags & GT_CAP_ENDF_RAISED))
            ck(f, gt_kernel_write(f->r, l->op, e->t->id, e->version, !e->unmarked));
        if (dup || after[k] == UINT32_MAX || after[k] == e->version || e->unmarked)
            continue;
        e->t->v->expected = after[k];
        ck(f, gt_version_bump(f->r, l->op, e->t->id, after[k], 0, NULL));
    }
}

static gt_id resolve(gt_fold *f, const void *impl, const void *vc, int latest)
{
    if (!impl)
        return 0;
    ftensor *t = tensor_known(f, impl, vc);
    if (t) {
        tensor_touch(f, t);
        return t->id;
    }
    if (!vc)
        return 0;
    /* a saved output is a shallow copy: the same counter, another TensorImpl */
    uint64_t *p = gt_map_get(&f->vcs, (uintptr_t)vc, 0, 0);
    if (!p)
        return 0;
    fvc *v = (fvc *)(uintptr_t)*p;
    gt_id id = latest ? named(f, v->last, v->last_epoch) : 0;
    return id ? id : named(f, v->id, v->id_epoch);
}

static void on_node(gt_fold *f, flane *l, const gt_cap_node *r)
{
    gt_node_info ni = {
        .id = (gt_id)r->id,
        .name = str_id(f, r->name),
        /* a node reached through edges was made by no op we know of, but
         * a CopySlices by the in-place op through a view that found it */
        .op = (r->h.flags & GT_CAP_NODEF_OF_OP) ||
                      (r->name && !strcmp(r->name, "CopySlices"))
                  ? l->op
                  : 0,
        .sequence_nr = r->sequence_nr,
        .thread = l->thread,
        .variable = resolve(f, r->variable_impl, r->variable_vc, 0),
    };
    if (!ni.name)
        return;
    fcall *rg = lane_region(l);
    int acc = r->name && !strcmp(r->name, "AccumulateGrad");
    if (rg && ni.op && !acc)
        ni.op = rg->seq; /* made by the checkpointed call */
    l->region_node = rg && !acc ? ni.id : 0;
    l->region_done = 0;
    ck(f, gt_node(f->r, &ni));
    const gt_cap_edge *e = (const gt_cap_edge *)(r + 1);
    for (uint32_t i = 0; i < r->nedges; i++)
        ck(f, gt_edge(f->r, (gt_id)r->id, (int)i, (gt_id)e[i].next, (int)e[i].input_nr));
}

/* More edges of a node than its GT_CAP_NODE record held. */
static void on_edges(gt_fold *f, const gt_cap_edges *r)
{
    const gt_cap_edge *e = (const gt_cap_edge *)(r + 1);
    for (uint32_t i = 0; i < r->n; i++)
        ck(f, gt_edge(f->r, (gt_id)r->node, (int)(r->first + i), (gt_id)e[i].next,
                      (int)e[i].input_nr));
}

static void on_node_out(gt_fold *f, const gt_cap_node_out *r)
{
    /* an output with a node has its grad_fn, so its flags are final: its
     * deferred row goes in now, in the commit of the row naming it (a size
     * cap's stop rolls back the batch that crosses it, and a row written
     * at the next sighting could be past it: node_outputs.tensor dangled) */
    ftensor *out = tensor_known(f, r->impl, r->vc);
    if (out)
        row_flush(f, out, NULL);
    gt_id t = resolve(f, r->impl, r->vc, 1);
    if (t)
        ck(f, gt_node_output(f->r, (gt_id)r->node, (int)r->output_nr, t));
}

/* What f->fps keeps of a saved tensor's fingerprint, under (node, slot),
 * and how many entries it holds at most: a node that never runs in
 * backward (a forward under grad mode whose graph is dropped) leaves its
 * entries, so past the cap the map is emptied and the nodes saved so far go
 * unchecked (some 87,000 saved tensors at once, about 10 MB). */
enum { FP_SEQ, FP_HASH, FP_BYTES };
#define FP_MAX_ENTRIES (1u << 18)

static void on_saved(gt_fold *f, flane *l, const gt_cap_saved *r)
{
    ftensor *st = r->t.impl ? tensor_known(f, r->t.impl, r->t.vc) : NULL;
    if (st)
        st->saved = 1;
    if (l->region_node && (gt_id)r->node == l->region_node) {
        /* saved through the checkpoint's hooks: never read (that would
         * recompute); what unpacking checks is the call's inputs */
        fcall *rg = lane_region(l);
        if (l->region_done)
            return;
        l->region_done = 1;
        for (int i = 0; rg && i < rg->n; i++) {
            char slot[48];
            snprintf(slot, sizeof slot, "checkpoint_input[%d]", i);
            gt_id sid = 0;
            if (ck(f, gt_intern_string(f->r, slot, strlen(slot), &sid)) < 0)
                return;
            ck(f, gt_saved_tensor_at(f->r, (gt_id)r->node, sid, rg->tensors[i],
                                     rg->versions[i], 0, rg->nbytes[i], rg->seq, NULL));
        }
        return;
    }

    gt_id t = r->t.impl ? resolve(f, r->t.impl, r->t.vc, r->is_output) : 0;
    int64_t sseq = 0;
    if (ck(f, gt_saved_tensor(f->r, (gt_id)r->node, str_id(f, r->slot), t,
                              r->saved_version, r->is_output, r->nbytes, &sseq)) < 0 ||
        r->hashed < 0 || !sseq)
        return;
    /* check_saved: its fingerprint now, kept until its node starts
     * (on_fp_use) */
    uintptr_t slot = (uintptr_t)r->slot;
    if (f->fps.len >= FP_MAX_ENTRIES)
        gt_map_clear(&f->fps);
    if (gt_map_put(&f->fps, r->node, slot, FP_SEQ, (uint64_t)sseq) < 0 ||
        gt_map_put(&f->fps, r->node, slot, FP_HASH, r->hash) < 0 ||
        gt_map_put(&f->fps, r->node, slot, FP_BYTES, (uint64_t)r->hashed) < 0)
        gt_map_del(&f->fps, r->node, slot, FP_SEQ); /* unchecked, as unhashed */
}

/* check_saved: a saved tensor's fingerprint as its node starts in backward,
 * once (as the dispatch adapter takes it at the node's first run); the
 * pair is written (saved_fingerprints) only when it differs from the one at
 * save: what is the same says nothing. */
static void on_fp_use(gt_fold *f, const gt_cap_fp_use *r)
{
    uintptr_t slot = (uintptr_t)r->slot;
    uint64_t *v = gt_map_get(&f->fps, r->node, slot, FP_SEQ);
    uint64_t *h = gt_map_get(&f->fps, r->node, slot, FP_HASH);
    uint64_t *n = gt_map_get(&f->fps, r->node, slot, FP_BYTES);
    if (v && h && n && cur_backward(f) && (*h != r->hash || (int64_t)*n != r->hashed)) {
        ck(f, gt_fingerprint(f->r, (int64_t)*v, 0, 0, (int64_t)*n, *h));
        ck(f, gt_fingerprint(f->r, (int64_t)*v, 1, cur_backward(f), r->hashed, r->hash));
    }
    for (uint64_t k = FP_SEQ; k <= FP_BYTES; k++)
        gt_map_del(&f->fps, r->node, slot, k);
}

/* A stack whose frames come in several records (GT_CAP_STACKF_MORE) is
 * interned as they come: f->stacks holds, under (key, STACK_*, 0), where
 * the last record left it. Records of a key are in order on their lane. */
enum { STACK_PARENT = 1, STACK_USER, STACK_NEXT };

static void stack_partial_drop(gt_fold *f, uint32_t key)
{
    for (uint64_t k = STACK_PARENT; k <= STACK_NEXT; k++)
        gt_map_del(&f->stacks, key, k, 0);
}

static void on_stack(gt_fold *f, const gt_cap_stack *r)
{
    const unsigned char *p = (const unsigned char *)(r + 1);
    const unsigned char *end = (const unsigned char *)r + r->h.len;
    gt_id parent = 0, user = 0;
    if (r->first) {
        /* the rest of a stack: where its previous record ended */
        uint64_t *next = gt_map_get(&f->stacks, r->id, STACK_NEXT, 0);
        uint64_t *pv = gt_map_get(&f->stacks, r->id, STACK_PARENT, 0);
        uint64_t *uv = gt_map_get(&f->stacks, r->id, STACK_USER, 0);
        if (!next || *next != r->first || !pv || !uv) {
            stack_partial_drop(f, r->id); /* one was lost: so is the stack */
            return;
        }
        parent = (gt_id)*pv;
        user = (gt_id)*uv;
    }
    uint32_t i = 0;
    for (; i < r->nframes; i++) {
        if (p + 8 > end)
            break;
        int32_t line, kind;
        memcpy(&line, p, 4);
        memcpy(&kind, p + 4, 4);
        const char *file = (const char *)p + 8;
        const char *func =
            file + strnlen(file, (size_t)(end - (const unsigned char *)file)) + 1;
        if ((const unsigned char *)func >= end)
            break;
        const char *code =
            func + strnlen(func, (size_t)(end - (const unsigned char *)func)) + 1;
        if ((const unsigned char *)code >= end)
            break;
        const char *stop =
            code + strnlen(code, (size_t)(end - (const unsigned char *)code)) + 1;
        const char *module = NULL;
        if (kind & GT_CAP_FRAME_MODULE) {
            if ((const unsigned char *)stop >= end)
                break;
            module = stop;
            stop = module +
                   strnlen(module, (size_t)(end - (const unsigned char *)module)) + 1;
            if ((const unsigned char *)stop > end)
                break;
        }
        gt_id fr = 0, sid = 0;
        if (ck(f, gt_intern_frame(f->r, file, line, func, *code ? code : NULL, &fr)) < 0)
            break;
        if ((kind & ~GT_CAP_FRAME_MODULE) == 0)
            user = fr;
        if (ck(f, gt_intern_stack_in(f->r, parent, fr, user, module, &sid)) < 0)
            break;
        parent = sid;
        p = (const unsigned char *)stop;
        p += (4 - ((uintptr_t)p & 3)) & 3;
    }
    if (i < r->nframes || !(r->h.flags & GT_CAP_STACKF_MORE)) {
        stack_partial_drop(f, r->id);
        if (i == r->nframes) /* else cut short: no stack rather than a wrong one */
            gt_map_put(&f->stacks, r->id, 0, 0, (uint64_t)parent);
        return;
    }
    if (gt_map_put(&f->stacks, r->id, STACK_PARENT, 0, (uint64_t)parent) < 0 ||
        gt_map_put(&f->stacks, r->id, STACK_USER, 0, (uint64_t)user) < 0 ||
        gt_map_put(&f->stacks, r->id, STACK_NEXT, 0, (uint64_t)r->first + r->nframes) < 0)
        stack_partial_drop(f, r->id);
}

/* `t.data = v` at its line (gt_cap_data_set): t, recorded on its old
 * memory if first seen now, moved to the new one with a storage swap of no
 * op and no backward call. A node that saved t before recording started is
 * named at the backward call that reaches it. */
static void on_data_set(gt_fold *f, const gt_cap_data_set *r)
{
    const int64_t *geom = r->old.ndim ? (const int64_t *)(r + 1) : NULL;
    gt_id stack = stack_id(f, r->stack);
    f->weak_pending = (r->old.flags & GT_CAPT_WEAK) ? r->old.impl : NULL;
    ftensor *t = see_input(f, &r->old, geom, 0, 0, stack);
    if (f->weak_pending)
        weak_release(f, f->weak_pending); /* not kept: known already */
    f->weak_pending = NULL;
    if (t)
        see_storage(f, t, &r->now, 0, 0, stack, 2);
}

static void on_bwd(gt_fold *f, const gt_cap_bwd *r)
{
    if (r->h.type == GT_CAP_BWD_BEGIN) {
        gt_backward_info bi = {
            .api = str_id(f, r->api),
            .retain_graph = r->retain_graph,
            .create_graph = r->create_graph,
            .thread = thread_id(f, r->os_tid),
            .stack = stack_id(f, r->stack),
        };
        gt_id id = 0;
        if (bi.api && ck(f, gt_backward_begin(f->r, &bi, &id)) < 0)
            id = 0;
        f->bwd_stack = bi.stack;
        if (!f->bwd_lost && GT_ALLOC_GROW(f->bwd, f->nbwd + 1, f->bwd_cap, 16) == 0)
            f->bwd[f->nbwd++] = id;
        else
            f->bwd_lost++; /* its end is matched, its events go to no call */
        return;
    }
    gt_id id = cur_backward(f);
    if (f->bwd_lost)
        f->bwd_lost--;
    else if (f->nbwd)
        f->nbwd--;
    if (id)
        ck(f, gt_backward_end(f->r, id, r->ok));
}

static void on_bwd_tensor(gt_fold *f, const gt_cap_bwd_tensor *r)
{
    gt_id id = cur_backward(f);
    if (!id || (r->t.flags & GT_CAPT_UNDEF))
        return;
    /* a tensor made before recording is first seen here */
    ftensor *t = see_input(f, &r->t, NULL, 0, id, 0);
    if (!t)
        return;
    if (r->h.type == GT_CAP_BWD_ROOT)
        ck(f, gt_backward_root(f->r, id, r->pos, t->id, (gt_id)(uintptr_t)r->node));
    else
        ck(f, gt_backward_input(f->r, id, r->pos, t->id));
}

/* The text record being put together on lane l is no more. */
static void text_drop(flane *l)
{
    free(l->text);
    l->text = NULL;
    l->text_len = l->text_cap = l->text_head = 0;
}

/* Add n bytes at p to the text record being put together; -1 (and it is
 * dropped) if memory runs out. */
static int text_put(flane *l, const void *p, size_t n)
{
    if (n > SIZE_MAX - l->text_len ||
        GT_ALLOC_GROW(l->text, l->text_len + n, l->text_cap, 4096) != 0) {
        text_drop(l);
        return -1;
    }
    memcpy(l->text + l->text_len, p, n);
    l->text_len += n;
    return 0;
}

/* A text record h arrives on lane l: 1 if it is whole (fold it now), 0 if
 * its text comes after it (GT_CAP_TEXTF_MORE): its struct is kept until
 * the GT_CAP_MORE records have brought the text. */
static int text_whole(flane *l, const gt_cap_hdr *h)
{
    if (l->text_head)
        text_drop(l); /* a text record before it never ended */
    if (!(h->flags & GT_CAP_TEXTF_MORE))
        return 1;
    if (text_put(l, h, h->len) == 0)
        l->text_head = h->len;
    return 0;
}

static void on_error(gt_fold *f, flane *l, const gt_cap_text *r);
static void on_name(gt_fold *f, flane *l, const gt_cap_name *r);

/* More of the text record being put together on lane l (gt_cap_more); at
 * its last piece the whole record is folded. A piece out of place (no
 * record being put together, or not where the text so far ends) drops the
 * record: no row rather than a cut one. */
static void on_more(gt_fold *f, flane *l, const gt_cap_more *r)
{
    const unsigned char *p = (const unsigned char *)(r + 1);
    if (!l->text_head || r->off != l->text_len - l->text_head ||
        r->n > r->h.len - sizeof *r) {
        text_drop(l);
        return;
    }
    if (text_put(l, p, (size_t)r->n) < 0 || (r->h.flags & GT_CAP_TEXTF_MORE))
        return;
    gt_cap_hdr *h = (gt_cap_hdr *)l->text;
    size_t len = l->text_len - l->text_head;
    const char *text = (const char *)l->text + l->text_head;
    h->flags &= (uint16_t)~GT_CAP_TEXTF_MORE;
    l->text_head = 0; /* folded as a record of one piece */
    if (len && !text[len - 1]) {
        if (h->type == GT_CAP_ERROR && h->len == sizeof(gt_cap_text)) {
            const gt_cap_text *t = (const gt_cap_text *)h;
            if (t->alen && t->alen <= len && !text[t->alen - 1])
                on_error(f, l, t);
        } else if (h->type == GT_CAP_NAME && h->len == sizeof(gt_cap_name))
            on_name(f, l, (const gt_cap_name *)h);
    }
    text_drop(l);
}

static void on_error(gt_fold *f, flane *l, const gt_cap_text *r)
{
    if (!text_whole(l, &r->h))
        return;
    const char *a = (const char *)(r + 1);
    const char *b = a + r->alen;
    ck(f, gt_error(f->r, a, b, stack_id(f, r->stack), cur_backward(f), NULL));
}

static void on_name(gt_fold *f, flane *l, const gt_cap_name *r)
{
    if (!text_whole(l, &r->h))
        return;
    ftensor *t = tensor_known(f, r->impl, r->vc);
    int64_t seq = (r->h.flags & GT_CAP_NAMEF_OP) && l->op ? l->op : gt_recorder_seq(f->r);
    tensor_touch(f, t);
    if (t)
        ck(f, gt_name(f->r, seq, t->id, (const char *)(r + 1)));
}

static void fold_one(gt_fold *f, flane *l, const gt_cap_hdr *h)
{
    switch (h->type) {
    case GT_CAP_OP:
        on_op(f, l, (const gt_cap_op *)h);
        break;
    case GT_CAP_ARG:
        on_arg(f, l, (const gt_cap_arg *)h);
        break;
    case GT_CAP_VERS:
    case GT_CAP_END:
        on_versions(f, l, (const gt_cap_end *)h);
        break;
    case GT_CAP_NODE:
        on_node(f, l, (const gt_cap_node *)h);
        break;
    case GT_CAP_EDGES:
        on_edges(f, (const gt_cap_edges *)h);
        break;
    case GT_CAP_NODE_OUT:
        on_node_out(f, (const gt_cap_node_out *)h);
        break;
    case GT_CAP_SAVED:
        on_saved(f, l, (const gt_cap_saved *)h);
        break;
    case GT_CAP_SWAP_SEEN: {
        const gt_cap_bwd_tensor *r = (const gt_cap_bwd_tensor *)h;
        ftensor *t = tensor_known(f, r->t.impl, r->t.vc);
        if (t && cur_backward(f)) {
            tensor_touch(f, t);
            see_storage(f, t, &r->t, 0, cur_backward(f), f->bwd_stack, 1);
        }
        break;
    }
    case GT_CAP_FP_USE:
        on_fp_use(f, (const gt_cap_fp_use *)h);
        break;
    case GT_CAP_DATA_SET:
        on_data_set(f, (const gt_cap_data_set *)h);
        break;
    case GT_CAP_CALL_END:
        on_call_end(f, l, (const gt_cap_call_end *)h, 0);
        break;
    case GT_CAP_CALL_POP:
        on_call_end(f, l, (const gt_cap_call_end *)h, 1);
        break;
    case GT_CAP_EXEC:
        if (cur_backward(f))
            ck(f, gt_node_exec(f->r, cur_backward(f),
                               (gt_id)((const gt_cap_exec *)h)->node));
        break;
    case GT_CAP_STACK:
        on_stack(f, (const gt_cap_stack *)h);
        break;
    case GT_CAP_BWD_BEGIN:
    case GT_CAP_BWD_END:
        on_bwd(f, (const gt_cap_bwd *)h);
        break;
    case GT_CAP_BWD_ROOT:
    case GT_CAP_BWD_INPUT:
        on_bwd_tensor(f, (const gt_cap_bwd_tensor *)h);
        break;
    case GT_CAP_ERROR:
        on_error(f, l, (const gt_cap_text *)h);
        break;
    case GT_CAP_NAME:
        on_name(f, l, (const gt_cap_name *)h);
        break;
    case GT_CAP_MORE:
        on_more(f, l, (const gt_cap_more *)h);
        break;
    case GT_CAP_REFRESH: {
        const gt_cap_refresh *r = (const gt_cap_refresh *)h;
        ftensor *t = tensor_known(f, r->impl, r->vc);
        if (t && t->row) {
            t->row->requires_grad = (r->flags & GT_CAPT_REQGRAD) != 0;
            t->row->is_leaf = (r->flags & GT_CAPT_LEAF) != 0;
        }
        break;
    }
    default:
        break;
    }
}

/* The next whole record of lane (NULL if none yet); recycles read chunks. */
static const gt_cap_hdr *peek(gt_cap_lane *lane)
{
    for (;;) {
        gt_cap_chunk *c = lane->read;
        size_t used = __atomic_load_n(&c->used, __ATOMIC_ACQUIRE);
        if (lane->read_off < used)
            return (const gt_cap_hdr *)(c->data + lane->read_off);
        gt_cap_chunk *next = __atomic_load_n(&c->next, __ATOMIC_ACQUIRE);
        if (!next)
            return NULL;
        /* the writer publishes used before linking next */
        if (lane->read_off < __atomic_load_n(&c->used, __ATOMIC_ACQUIRE))
            continue;
        lane->read = next;
        lane->read_off = 0;
        gt_capture_recycle(lane, c);
    }
}

static int drain_locked(gt_fold *f)
{
    unsigned folded = 0;
    /* lanes are only appended: a lane made during the drain is one the
     * first lane's next_lane shows (or the first) */
    gt_cap_lane *first = NULL;
    for (;;) {
        gt_cap_lane *best = NULL;
        const gt_cap_hdr *bh = NULL;
        if (!first)
            first = gt_capture_lanes();
        if (first && !__atomic_load_n(&first->next_lane, __ATOMIC_ACQUIRE)) {
            /* one lane: its next record, no stamps to compare */
            bh = peek(first);
            best = bh ? first : NULL;
        } else {
            for (gt_cap_lane *l = first; l;
                 l = __atomic_load_n(&l->next_lane, __ATOMIC_ACQUIRE)) {
                const gt_cap_hdr *h = peek(l);
                if (h && (!bh || h->stamp < bh->stamp)) {
                    best = l;
                    bh = h;
                }
            }
        }
        if (!best)
            break;
        if (!best->consumer)
            best->consumer = calloc(1, sizeof(flane));
        if (folded++ % GT__FOLD_HOLD == 0) {
            /* the recorder is held over GT__FOLD_HOLD records at a time:
             * its calls then skip taking its mutex */
            unhold(f);
            f->holding = gt_recorder_hold(f->r) == 0;
        }
        if (best->consumer)
            fold_one(f, best->consumer, bh);
        best->read_off += bh->len;
    }
    unhold(f);
    if (f->rc && !f->warned) {
        /* a write failure (size cap, full disk) stops recording, not the run */
        const char *msg = gt_recorder_errmsg(f->r);
        if (!msg[0])
            msg = gt_strerror(f->rc);
        if (!strncmp(msg, "gradtrace: ", 11))
            fprintf(stderr, "%s\n", msg);
        else if (!strncmp(msg, "recording stopped", 17))
            fprintf(stderr, "gradtrace: %s\n", msg); /* the size cap says it */
        else
            fprintf(stderr, "gradtrace: recording stopped: %s\n", msg);
        fflush(stderr);
        f->warned = 1;
        gt_capture_set_active(0);
    }
    return f->rc;
}

/* Release t's weak reference if t is an entry of the tensor at impl. */
static void weak_let_go(ftensor *t, const void *impl)
{
    if (t && t->impl == impl && t->weak) {
        gt_capture_weak_release(impl);
        t->weak = 0;
    }
}

void gt_fold_forget_tensor(gt_fold *f, const void *impl)
{
    pthread_mutex_lock(&f->mu);
    (void)drain_locked(f); /* the records naming it let go of theirs */
    uint64_t *v = gt_map_get(&f->tensors, (uintptr_t)impl, 0, 0);
    if (v) {
        ftensor *t = (ftensor *)(uintptr_t)*v;
        gt_map_del(&f->tensors, (uintptr_t)impl, 0, 0);
        weak_let_go(t, impl);
        tensor_drop(f, t); /* the map's reference */
    }
    /* older entries of that address the lanes still hold */
    for (gt_cap_lane *cl = gt_capture_lanes(); cl; cl = cl->next_lane) {
        flane *l = cl->consumer;
        for (int i = 0; l && i < l->nin; i++)
            weak_let_go(l->in[i].t, impl);
        for (size_t i = 0; l && i < l->npending; i++)
            weak_let_go(l->pending[i], impl);
    }
    pthread_mutex_unlock(&f->mu);
}

void gt_fold_observe_version(gt_fold *f, const void *impl, const void *vc,
                             uint32_t version)
{
    pthread_mutex_lock(&f->mu);
    (void)drain_locked(f); /* the ops before it first */
    ftensor *t = vc ? tensor_known(f, impl, vc) : NULL;
    if (t)
        observe(f, t, version);
    pthread_mutex_unlock(&f->mu);
}

int gt_fold_drain(gt_fold *f)
{
    pthread_mutex_lock(&f->mu);
    int rc = drain_locked(f);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static void *fold_main(void *arg)
{
    gt_fold *f = arg;
    pthread_mutex_lock(&f->wmu);
    while (!f->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)f->period_ms * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&f->wcv, &f->wmu, &ts);
        if (f->stop)
            break;
        pthread_mutex_unlock(&f->wmu);
        gt_fold_drain(f);
        gt_recorder_flush(f->r);
        pthread_mutex_lock(&f->wmu);
    }
    pthread_mutex_unlock(&f->wmu);
    return NULL;
}

int gt_fold_new(gt_recorder *r, int windowed, gt_fold **out)
{
    gt_fold *f = calloc(1, sizeof *f);
    if (!f)
        return GT_ENOMEM;
    f->r = r;
    f->windowed = windowed != 0;
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->wmu, NULL);
    pthread_cond_init(&f->wcv, NULL);
    *out = f;
    return 0;
}

int gt_fold_start(gt_fold *f, unsigned period_ms)
{
    f->period_ms = period_ms ? period_ms : 50;
    f->stop = 0;
    if (pthread_create(&f->thread, NULL, fold_main, f) != 0)
        return GT_ENOMEM;
    f->running = 1;
    return 0;
}

static void free_maps(gt_fold *f, int lanes)
{
    if (lanes)
        for (gt_cap_lane *l = gt_capture_lanes(); l; l = l->next_lane) {
            if (l->consumer) {
                flane *fl = l->consumer;
                lane_reset(f, fl);
                pending_flush(f, fl);
                lane_free(fl);
            }
            free(l->consumer);
            l->consumer = NULL;
        }
    for (size_t i = 0; i < f->tensors.cap; i++)
        if (f->tensors.slots[i].used)
            tensor_drop(f, (ftensor *)(uintptr_t)f->tensors.slots[i].value);
    gt_map_clear(&f->tensors);
    gt_map_clear(&f->byid);
    gt_map_clear(&f->vcs);
    gt_map_clear(&f->strs);
    gt_map_clear(&f->storages);
    gt_map_clear(&f->stor_first);
    gt_map_clear(&f->stacks);
    gt_map_clear(&f->threads);
    gt_map_clear(&f->fps);
    free(f->wrel);
    f->wrel = NULL;
    f->nwrel = f->cap_wrel = 0;
    while (f->free_t) {
        ftensor *t = f->free_t;
        f->free_t = (ftensor *)t->v;
        free(t);
    }
    while (f->free_v) {
        fvc *v = f->free_v;
        f->free_v = (fvc *)(uintptr_t)v->storage;
        free(v);
    }
}

void gt_fold_free(gt_fold *f)
{
    if (!f)
        return;
    if (f->running) {
        pthread_mutex_lock(&f->wmu);
        f->stop = 1;
        pthread_cond_signal(&f->wcv);
        pthread_mutex_unlock(&f->wmu);
        pthread_join(f->thread, NULL);
        f->running = 0;
    }
    gt_fold_drain(f);
    free_maps(f, 1);
    free(f->bwd);
    pthread_mutex_destroy(&f->mu);
    pthread_mutex_destroy(&f->wmu);
    pthread_cond_destroy(&f->wcv);
    free(f);
}

void gt_fold_forget(gt_fold *f)
{
    if (!f)
        return;
    /* the thread does not exist in a forked child, its mutexes and the
     * recorder's may be held, and dropping entries would write rows: the
     * memory stays with the child */
    (void)f;
}

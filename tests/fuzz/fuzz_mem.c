/*
 * SQLite's memory for the fuzz harnesses (see fuzz_common.h).
 *
 * Debian's SQLite is built without lookaside (SQLITE_OMIT_LOOKASIDE), so
 * each of the ~10,000 objects SQLite allocates to parse a trace's schema and
 * compile a diagnosis's statements is one ASan malloc and free, with its
 * stack trace, its quarantine and fresh pages: most of an input's time
 * (perf). SQLite gets its memory here instead (SQLITE_CONFIG_MALLOC), from
 * size classes carved out of large blocks, kept under ASan's watch by hand:
 *   - a block's bytes are poisoned except the live allocations, each exactly
 *     as large as asked (rounded to 8), with a poisoned header and a 16-byte
 *     poisoned redzone after it: the inspector reading past what SQLite
 *     gave it, or a freed value (a column's text after its statement moved
 *     on), is an ASan report as before (use-after-poison);
 *   - a freed allocation is reused first in first out, only once its class
 *     holds 64 KB or 64 freed ones (a quarantine per class; a larger one,
 *     256 KB, cost 10-15% more in cache misses on reused headers);
 *   - what SQLite holds is counted: gtf_run aborts if a command leaves more
 *     allocated than it found (a statement or a string never freed), which
 *     LeakSanitizer can no longer see inside the blocks.
 * Allocations over MEM_MAX go to malloc as before (with a header).
 * This file is built with ASan and UBSan but without libFuzzer's coverage
 * (tests/fuzz/CMakeLists.txt): its branches are the harness's, not the
 * input's, and traced they cost more than the allocations they replace. */
#include "fuzz_common.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sanitizer/asan_interface.h>
#include <sqlite3.h>

#define MEM_MAX   8192 /* largest size served from the classes */
#define MEM_HEAD  16   /* header before each allocation: class, size */
#define MEM_RED   16   /* poisoned redzone after each */
#define MEM_BLOCK (1 << 20)

typedef struct mem_class {
    void **q; /* ring of freed allocations, oldest at head */
    size_t head, n, cap;
} mem_class;

static struct {
    mem_class cls[MEM_MAX / 8 + 1];
    char *block;   /* the block being carved */
    size_t used;   /* bytes of it carved */
    void **blocks; /* every block (kept reachable for LeakSanitizer) */
    size_t nblocks, capblocks;
    long long live; /* allocations SQLite holds */
} M;

typedef struct mem_head {
    uint32_t cls;  /* 0: from malloc */
    uint32_t size; /* bytes asked (rounded to 8) */
    uint64_t big;  /* size, for one from malloc */
} mem_head;

__attribute__((no_sanitize("address"))) static mem_head *head_of(void *p)
{
    return (mem_head *)((char *)p - MEM_HEAD);
}

/* ASan's shadow memory: a class's allocation and its size are multiples of
 * 8, so its shadow is whole bytes, written here directly: 0 addressable,
 * 0xf7 poisoned by the user, exactly what ASAN_(UN)POISON_MEMORY_REGION
 * write, without their checks for any alignment and size (4% of the
 * diagnose harness's time). Not through memset: ASan's interceptor would
 * check the shadow's own shadow. */
static size_t shadow_off; /* 0: not scale 3, use the interface */

typedef uint64_t shadow_word __attribute__((aligned(1), may_alias));

__attribute__((no_sanitize("address"), no_builtin("memset"))) static void
shadow_fill(void *p, size_t sz, unsigned char v)
{
    if (!shadow_off) {
        if (v)
            ASAN_POISON_MEMORY_REGION(p, sz);
        else
            ASAN_UNPOISON_MEMORY_REGION(p, sz);
        return;
    }
    unsigned char *sh = (unsigned char *)(((uintptr_t)p >> 3) + shadow_off);
    size_t n = sz >> 3, i = 0;
    uint64_t w = v * 0x0101010101010101u;
    for (; i + 8 <= n; i += 8)
        *(volatile shadow_word *)(sh + i) = w;
    for (; i < n; i++)
        ((volatile unsigned char *)sh)[i] = v;
}

static int mem_queue(mem_class *c, void *p)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        void **q = malloc(cap * sizeof *q);
        if (!q)
            return -1;
        for (size_t i = 0; i < c->n; i++)
            q[i] = c->q[(c->head + i) & (c->cap - 1)];
        free(c->q);
        c->q = q;
        c->cap = cap;
        c->head = 0;
    }
    c->q[(c->head + c->n++) & (c->cap - 1)] = p; /* cap: a power of 2 */
    return 0;
}

__attribute__((no_sanitize("address"))) static void *mem_malloc(int n)
{
    if (n <= 0)
        return NULL;
    size_t sz = ((size_t)n + 7) & ~(size_t)7;
    char *p;
    if (sz > MEM_MAX) {
        p = malloc(MEM_HEAD + sz);
        if (!p)
            return NULL;
        *(mem_head *)p = (mem_head){0, 0, sz};
        M.live++;
        return p + MEM_HEAD;
    }
    size_t k = sz / 8;
    mem_class *c = &M.cls[k];
    if (c->n > 0 && (c->n >= 64 || c->n * sz >= (64u << 10))) {
        p = c->q[c->head];
        c->head = (c->head + 1) & (c->cap - 1);
        c->n--;
    } else {
        size_t stride = MEM_HEAD + sz + MEM_RED;
        if (!M.block || M.used + stride > MEM_BLOCK) {
            if (M.nblocks == M.capblocks) {
                size_t cap = M.capblocks ? 2 * M.capblocks : 16;
                void **b = realloc(M.blocks, cap * sizeof *b);
                if (!b)
                    return NULL;
                M.blocks = b;
                M.capblocks = cap;
            }
            char *b = malloc(MEM_BLOCK);
            if (!b)
                return NULL;
            ASAN_POISON_MEMORY_REGION(b, MEM_BLOCK);
            M.blocks[M.nblocks++] = b;
            M.block = b;
            M.used = 0;
        }
        p = M.block + M.used + MEM_HEAD;
        M.used += stride;
    }
    *head_of(p) = (mem_head){(uint32_t)k, (uint32_t)sz, 0};
    shadow_fill(p, sz, 0);
    M.live++;
    return p;
}

__attribute__((no_sanitize("address"))) static void mem_free(void *p)
{
    if (!p)
        return;
    mem_head *h = head_of(p);
    M.live--;
    if (h->cls == 0) {
        free(h);
        return;
    }
    shadow_fill(p, h->size, 0xf7);
    if (mem_queue(&M.cls[h->cls], p) != 0)
        abort(); /* the fuzzer's own memory is out */
}

__attribute__((no_sanitize("address"))) static int mem_size(void *p)
{
    if (!p)
        return 0;
    mem_head *h = head_of(p);
    return (int)(h->cls ? h->size : h->big);
}

static void *mem_realloc(void *p, int n)
{
    int old = mem_size(p);
    void *q = mem_malloc(n);
    if (q) {
        memcpy(q, p, (size_t)(old < n ? old : n));
        mem_free(p);
    }
    return q;
}

static int mem_roundup(int n)
{
    return (n + 7) & ~7;
}

static int mem_init(void *arg)
{
    (void)arg;
    return SQLITE_OK;
}

static void mem_shutdown(void *arg)
{
    (void)arg;
}

static const sqlite3_mem_methods mem_methods = {mem_malloc,   mem_free,    mem_realloc,
                                                mem_size,     mem_roundup, mem_init,
                                                mem_shutdown, NULL};

int gtf_mem_install(void)
{
    size_t scale = 0, off = 0;
    __asan_get_shadow_mapping(&scale, &off);
    shadow_off = scale == 3 ? off : 0;
    return sqlite3_config(SQLITE_CONFIG_MALLOC, &mem_methods) == SQLITE_OK ? 0 : -1;
}

long long gtf_mem_live(void)
{
    return M.live;
}

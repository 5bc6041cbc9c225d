/* Open-addressing interning tables (see intern.h). */
#include "intern.h"

#include <gradtrace/recorder.h>
#include <stdlib.h>
#include <string.h>

#define GT__ARENA_BLOCK 65536

struct gt__arena_block {
    struct gt__arena_block *next;
    size_t used;
    size_t size;
    char data[];
};

uint64_t gt__strhash(const char *s, size_t len)
{
    /* FNV-1a, then a final mix so that the low bits used for the slot
     * index depend on every byte. */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    h ^= h >> 32;
    h *= 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
    return h;
}

static uint64_t mix64(uint64_t x)
{
    /* splitmix64 finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t inthash(const int64_t *key, int nkey)
{
    uint64_t h = 0x243f6a8885a308d3ULL;
    for (int i = 0; i < nkey; i++)
        h = mix64(h ^ (uint64_t)key[i]);
    return h;
}

/* ---- strings ---------------------------------------------------------- */

void gt__strtab_init(gt__strtab *t)
{
    memset(t, 0, sizeof(*t));
}

void gt__strtab_release(gt__strtab *t)
{
    struct gt__arena_block *b = t->blocks;
    while (b) {
        struct gt__arena_block *next = b->next;
        free(b);
        b = next;
    }
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

int64_t gt__strtab_find(const gt__strtab *t, const char *s, size_t len, uint64_t hash)
{
    if (t->cap == 0)
        return 0;
    size_t mask = t->cap - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        const struct gt__strent *e = &t->slots[i];
        if (e->id == 0)
            return 0;
        if (e->hash == hash && e->len == len && memcmp(e->s, s, len) == 0)
            return e->id;
    }
}

static void strtab_place(struct gt__strent *slots, size_t cap, const struct gt__strent *e)
{
    size_t mask = cap - 1;
    size_t i = e->hash & mask;
    while (slots[i].id != 0)
        i = (i + 1) & mask;
    slots[i] = *e;
}

static char *arena_copy(gt__strtab *t, const char *s, size_t len)
{
    struct gt__arena_block *b = t->blocks;
    if (!b || b->size - b->used < len + 1) {
        size_t size = len + 1 > GT__ARENA_BLOCK / 4 ? len + 1 : GT__ARENA_BLOCK;
        struct gt__arena_block *nb = malloc(sizeof(*nb) + size);
        if (!nb)
            return NULL;
        nb->used = 0;
        nb->size = size;
        if (b && size != GT__ARENA_BLOCK) {
            /* a big string gets its own block, kept behind the current one */
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            t->blocks = nb;
        }
        b = nb;
    }
    char *p = b->data + b->used;
    memcpy(p, s, len);
    p[len] = '\0';
    b->used += len + 1;
    return p;
}

int gt__strtab_add(gt__strtab *t, const char *s, size_t len, uint64_t hash, int64_t id)
{
    if ((t->n + 1) * 2 > t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 256;
        struct gt__strent *ns = calloc(ncap, sizeof(*ns));
        if (!ns)
            return GT_ENOMEM;
        for (size_t i = 0; i < t->cap; i++)
            if (t->slots[i].id != 0)
                strtab_place(ns, ncap, &t->slots[i]);
        free(t->slots);
        t->slots = ns;
        t->cap = ncap;
    }
    char *copy = arena_copy(t, s, len);
    if (!copy)
        return GT_ENOMEM;
    struct gt__strent e = {.hash = hash, .id = id, .len = len, .s = copy};
    strtab_place(t->slots, t->cap, &e);
    t->n++;
    return 0;
}

size_t gt__strtab_bytes(const gt__strtab *t)
{
    size_t bytes = t->cap * sizeof(struct gt__strent);
    for (const struct gt__arena_block *b = t->blocks; b; b = b->next)
        bytes += sizeof(*b) + b->size;
    return bytes;
}

/* ---- integer keys ----------------------------------------------------- */

void gt__inttab_init(gt__inttab *t, int nkey)
{
    memset(t, 0, sizeof(*t));
    t->nkey = nkey;
    t->stride = nkey + 2;
}

void gt__inttab_release(gt__inttab *t)
{
    free(t->slots);
    t->slots = NULL;
    t->cap = t->n = 0;
}

static int key_eq(const int64_t *a, const int64_t *b, int nkey)
{
    for (int i = 0; i < nkey; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

int64_t gt__inttab_find(const gt__inttab *t, const int64_t *key, int64_t *aux)
{
    if (t->cap == 0)
        return 0;
    size_t mask = t->cap - 1;
    for (size_t i = inthash(key, t->nkey) & mask;; i = (i + 1) & mask) {
        const int64_t *e = t->slots + i * (size_t)t->stride;
        if (e[t->nkey] == 0)
            return 0;
        if (key_eq(e, key, t->nkey)) {
            if (aux)
                *aux = e[t->nkey + 1];
            return e[t->nkey];
        }
    }
}

static void inttab_place(int64_t *slots, size_t cap, int nkey, const int64_t *e)
{
    size_t mask = cap - 1, stride = (size_t)nkey + 2;
    size_t i = inthash(e, nkey) & mask;
    while (slots[i * stride + (size_t)nkey] != 0)
        i = (i + 1) & mask;
    memcpy(slots + i * stride, e, stride * sizeof(int64_t));
}

int gt__inttab_add(gt__inttab *t, const int64_t *key, int64_t id, int64_t aux)
{
    size_t stride = (size_t)t->stride;
    if ((t->n + 1) * 2 > t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 256;
        int64_t *ns = calloc(ncap, stride * sizeof(int64_t));
        if (!ns)
            return GT_ENOMEM;
        for (size_t i = 0; i < t->cap; i++)
            if (t->slots[i * stride + (size_t)t->nkey] != 0)
                inttab_place(ns, ncap, t->nkey, t->slots + i * stride);
        free(t->slots);
        t->slots = ns;
        t->cap = ncap;
    }
    int64_t e[GT__INTTAB_MAXKEY + 2];
    memcpy(e, key, (size_t)t->nkey * sizeof(int64_t));
    e[t->nkey] = id;
    e[t->nkey + 1] = aux;
    inttab_place(t->slots, t->cap, t->nkey, e);
    t->n++;
    return 0;
}

size_t gt__inttab_bytes(const gt__inttab *t)
{
    return t->cap * (size_t)t->stride * sizeof(int64_t);
}

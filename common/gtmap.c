/* Open-addressing hash map; see gtmap.h. */
#include "gtmap.h"

#include <stdlib.h>

/* inline: a call cost a third of a one-word key's hash */
static inline __attribute__((always_inline)) uint64_t mix(uint64_t k1, uint64_t k2,
                                                          uint64_t k3)
{
    uint64_t h = k1 * 0x9E3779B97F4A7C15ull;
    if (k2 | k3) { /* most keys are one word (addresses, ids) */
        h ^= k2 + 0xC2B2AE3D27D4EB4Full + (h << 6) + (h >> 2);
        h ^= k3 * 0x165667B19E3779F9ull + (h << 6) + (h >> 2);
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static int same(const gt_map_entry *e, uint64_t k1, uint64_t k2, uint64_t k3)
{
    return e->used && e->k1 == k1 && e->k2 == k2 && e->k3 == k3;
}

uint64_t *gt_map_get(const gt_map *m, uint64_t k1, uint64_t k2, uint64_t k3)
{
    if (!m->cap)
        return NULL;
    size_t mask = m->cap - 1;
    for (size_t i = mix(k1, k2, k3) & mask;; i = (i + 1) & mask) {
        gt_map_entry *e = &m->slots[i];
        if (!e->used)
            return NULL;
        if (same(e, k1, k2, k3))
            return &e->value;
    }
}

static int grow(gt_map *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 64;
    gt_map_entry *ns = calloc(ncap, sizeof *ns);
    if (!ns)
        return -1;
    for (size_t j = 0; j < m->cap; j++) {
        gt_map_entry *e = &m->slots[j];
        if (!e->used)
            continue;
        size_t i = mix(e->k1, e->k2, e->k3) & (ncap - 1);
        while (ns[i].used)
            i = (i + 1) & (ncap - 1);
        ns[i] = *e;
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

uint64_t *gt_map_upsert(gt_map *m, uint64_t k1, uint64_t k2, uint64_t k3, int *added)
{
    uint64_t h = mix(k1, k2, k3);
    size_t i = 0;
    if (m->cap) {
        size_t mask = m->cap - 1;
        for (i = h & mask; m->slots[i].used; i = (i + 1) & mask)
            if (same(&m->slots[i], k1, k2, k3)) {
                *added = 0;
                return &m->slots[i].value;
            }
    }
    if ((m->len + 1) * 4 > m->cap * 3) {
        if (grow(m) < 0)
            return NULL;
        size_t mask = m->cap - 1;
        for (i = h & mask; m->slots[i].used; i = (i + 1) & mask)
            ;
    }
    m->slots[i] = (gt_map_entry){k1, k2, k3, 0, 1};
    m->len++;
    *added = 1;
    return &m->slots[i].value;
}

int gt_map_put(gt_map *m, uint64_t k1, uint64_t k2, uint64_t k3, uint64_t value)
{
    int added;
    uint64_t *v = gt_map_upsert(m, k1, k2, k3, &added);
    if (!v)
        return -1;
    *v = value;
    return 0;
}

int gt_map_del(gt_map *m, uint64_t k1, uint64_t k2, uint64_t k3)
{
    if (!m->cap)
        return 0;
    size_t mask = m->cap - 1;
    size_t i = mix(k1, k2, k3) & mask;
    while (!same(&m->slots[i], k1, k2, k3)) {
        if (!m->slots[i].used)
            return 0;
        i = (i + 1) & mask;
    }
    /* Backward-shift: pull later entries of the probe run into the hole. */
    size_t hole = i;
    for (size_t j = (i + 1) & mask; m->slots[j].used; j = (j + 1) & mask) {
        gt_map_entry *e = &m->slots[j];
        size_t home = mix(e->k1, e->k2, e->k3) & mask;
        /* e may move to hole if hole lies cyclically in [home, j). */
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            m->slots[hole] = *e;
            hole = j;
        }
    }
    m->slots[hole].used = 0;
    m->len--;
    return 1;
}

void gt_map_reset(gt_map *m)
{
    for (size_t i = 0; i < m->cap; i++)
        m->slots[i].used = 0;
    m->len = 0;
}

void gt_map_clear(gt_map *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = 0;
    m->len = 0;
}

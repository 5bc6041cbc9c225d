/*
 * A small open-addressing hash map from a key of three 64-bit words to a
 * 64-bit value: the one id map of the recorder and the inspector. The
 * PyTorch adapter keeps its caches in it (tensors by object address,
 * storages by data pointer, stacks by (parent, code, offset), ...); the
 * graph builder its node indexes by node id (k2 = k3 = 0).
 *
 * Linear probing with backward-shift deletion, so deletions leave no
 * tombstones and lookups stay short in maps with heavy churn (tensors).
 * Not thread-safe: a map belongs to one thread at a time (the adapter
 * only touches its maps with the GIL held).
 */
#ifndef GT_ADAPTER_MAP_H
#define GT_ADAPTER_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct gt_map_entry {
    uint64_t k1, k2, k3;
    uint64_t value;
    int used;
} gt_map_entry;

typedef struct gt_map {
    gt_map_entry *slots;
    size_t cap; /* power of two, 0 before the first insert */
    size_t len;
} gt_map;

/* Find the key; returns a pointer to its value or NULL. The pointer is valid
 * until the next insert or delete. */
uint64_t *gt_map_get(const gt_map *m, uint64_t k1, uint64_t k2, uint64_t k3);

/* Insert or replace. Returns 0, or -1 when out of memory (map unchanged). */
int gt_map_put(gt_map *m, uint64_t k1, uint64_t k2, uint64_t k3, uint64_t value);

/* The value of the key, inserted with value 0 if absent (*added says which:
 * one probe where get then put take two). NULL when out of memory (map
 * unchanged). The pointer is valid until the next insert or delete. */
uint64_t *gt_map_upsert(gt_map *m, uint64_t k1, uint64_t k2, uint64_t k3, int *added);

/* Remove the key if present; returns 1 if it was there, else 0. */
int gt_map_del(gt_map *m, uint64_t k1, uint64_t k2, uint64_t k3);

/* Free the slots; the map is empty and reusable afterwards. */
void gt_map_clear(gt_map *m);

/* Empty the map but keep its slots (no allocation when it is filled
 * again to the same size). */
void gt_map_reset(gt_map *m);

#endif

/*
 * In-memory interning tables of the recorder: open-addressing hash tables
 * that map a key to the integer id the trace uses for it.
 *
 *   gt__strtab  byte strings -> id (the bytes are copied into an arena)
 *   gt__inttab  up to 4 int64 keys -> id (frames, stacks, threads)
 *
 * Both grow by doubling and keep the load factor at most 1/2. They are the
 * only part of the recorder whose memory grows with the run: one entry per
 * distinct string, frame, stack and thread. Not thread-safe: the recorder
 * calls them under its handle mutex.
 */
#ifndef GT_RECORDER_INTERN_H
#define GT_RECORDER_INTERN_H

#include <stddef.h>
#include <stdint.h>

#define GT__INTTAB_MAXKEY 4

struct gt__strent {
    uint64_t hash;
    int64_t id; /* 0: empty slot */
    size_t len;
    const char *s;
};

struct gt__arena_block;

typedef struct gt__strtab {
    struct gt__strent *slots;
    size_t cap; /* power of two, 0 before the first insert */
    size_t n;
    struct gt__arena_block *blocks;
} gt__strtab;

/* A slot is nkey + 2 int64 laid out as key[0..nkey), id, aux, so that a
 * table of 2-int keys (stacks) takes 32 bytes a slot. id 0: empty slot. */
typedef struct gt__inttab {
    int64_t *slots;
    size_t cap;
    size_t n;
    int nkey;   /* 1..GT__INTTAB_MAXKEY */
    int stride; /* nkey + 2 */
} gt__inttab;

/* Hash of a byte string (for gt__strtab_find / gt__strtab_add). */
uint64_t gt__strhash(const char *s, size_t len);

void gt__strtab_init(gt__strtab *t);
void gt__strtab_release(gt__strtab *t);
/* The id of (s, len) or 0 if absent. */
int64_t gt__strtab_find(const gt__strtab *t, const char *s, size_t len, uint64_t hash);
/* Add (s, len) -> id; the key must be absent. Returns 0 or GT_ENOMEM (the
 * table is then unchanged). */
int gt__strtab_add(gt__strtab *t, const char *s, size_t len, uint64_t hash, int64_t id);

void gt__inttab_init(gt__inttab *t, int nkey);
void gt__inttab_release(gt__inttab *t);
/* The id of key[0..nkey) or 0 if absent; *aux (if not NULL) gets the value
 * stored beside it. */
int64_t gt__inttab_find(const gt__inttab *t, const int64_t *key, int64_t *aux);
/* Add key -> (id, aux); the key must be absent. Returns 0 or GT_ENOMEM. */
int gt__inttab_add(gt__inttab *t, const int64_t *key, int64_t id, int64_t aux);

/* Bytes of memory held by the table (for tests and the benchmark). */
size_t gt__strtab_bytes(const gt__strtab *t);
size_t gt__inttab_bytes(const gt__inttab *t);

#endif

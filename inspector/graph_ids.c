/* graph_ids.c: a cgraph ID discipline that counts (see graph_int.h).
 *
 * Each name gets the next ID the first time it is mapped and keeps it; an
 * anonymous object (an edge) gets the next ID too. The names live in the
 * graph's string pool, listed in the discipline's state until the graph
 * closes: cgraph prints an object's name through `print`. Names are found through a
 * gt_map keyed by the name's FNV-1a hash and length, the third key word stepping past a
 * collision. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph_int.h"
#include "grow.h"
#include "gtmap.h"

typedef struct ids {
    Agraph_t *g;    /* the root graph: its string pool holds the names */
    gt_map by_name; /* (hash, length, step) -> index into names */
    char **names;   /* the name of ID i + 1 (agstrdup: cgraph tells an HTML
                       label by the pool's mark), NULL for an anonymous one */
    size_t n, cap;
} ids;

static uint64_t fnv1a(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static void *ids_open(Agraph_t *g, Agdisc_t *disc)
{
    (void)disc;
    ids *s = calloc(1, sizeof(ids));
    if (s)
        s->g = g;
    return s;
}

/* A new ID for name (NULL: anonymous); 0 when out of memory. */
static IDTYPE ids_add(ids *s, char *name)
{
    char *copy = NULL;
    if (GT_ALLOC_GROW(s->names, s->n + 1, s->cap, 64) != 0 ||
        (name && !(copy = agstrdup(s->g, name))))
        return 0;
    s->names[s->n++] = copy;
    return (IDTYPE)s->n;
}

static long ids_map(void *state, int objtype, char *str, IDTYPE *id, int createflag)
{
    ids *s = state;
    (void)objtype;
    if (!s)
        return 0;
    if (!str)
        return (*id = ids_add(s, NULL)) != 0;
    size_t len = strlen(str);
    uint64_t h = fnv1a(str, len);
    uint64_t step = 0;
    for (;; step++) {
        uint64_t *at = gt_map_get(&s->by_name, h, len, step);
        if (!at)
            break;
        if (!strcmp(s->names[*at], str)) {
            *id = (IDTYPE)*at + 1;
            return 1;
        }
    }
    if (!createflag || !(*id = ids_add(s, str)))
        return 0;
    if (gt_map_put(&s->by_name, h, len, step, (uint64_t)(*id - 1)) != 0) {
        agstrfree(s->g, s->names[--s->n]);
        return 0;
    }
    return 1;
}

static long ids_alloc(void *state, int objtype, IDTYPE id)
{
    (void)state;
    (void)objtype;
    (void)id;
    return 0; /* no object asks for an ID of its own */
}

static void ids_free(void *state, int objtype, IDTYPE id)
{
    (void)state;
    (void)objtype;
    (void)id; /* names stay until the graph closes */
}

static char *ids_print(void *state, int objtype, IDTYPE id)
{
    ids *s = state;
    (void)objtype;
    return s && id >= 1 && id <= s->n ? s->names[id - 1] : NULL;
}

static void ids_close(void *state)
{
    ids *s = state;
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) /* before cgraph closes the pool */
        if (s->names[i])
            agstrfree(s->g, s->names[i]);
    free(s->names);
    gt_map_clear(&s->by_name);
    free(s);
}

static void ids_register(void *state, int objtype, void *obj)
{
    (void)state;
    (void)objtype;
    (void)obj;
}

static Agiddisc_t counting_ids = {
    .open = ids_open,
    .map = ids_map,
    .alloc = ids_alloc,
    .free = ids_free,
    .print = ids_print,
    .close = ids_close,
    .idregister = ids_register,
};

/* the memory and I/O disciplines stay cgraph's (agopen fills in NULL) */
Agdisc_t gt__graph_disc = {.id = &counting_ids};

/* Several traces at once: rank naming and rank sets; see multi.h. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <gradtrace/recorder.h>

#include "multi.h"
#include "trace.h"

#define RANK_FIELD "{rank}"

char *gt_rank_path(const char *path, int64_t rank)
{
    char num[32];
    int nn = snprintf(num, sizeof num, "%lld", (long long)rank);
    size_t len = strlen(path);
    const char *field = strstr(path, RANK_FIELD);
    if (field) {
        /* every occurrence, as str.replace does */
        size_t count = 0;
        for (const char *p = field; p; p = strstr(p + 1, RANK_FIELD))
            count++;
        char *out = malloc(len + count * (size_t)nn + 1);
        if (!out)
            return NULL;
        char *o = out;
        for (const char *p = path; *p;) {
            if (!strncmp(p, RANK_FIELD, strlen(RANK_FIELD))) {
                memcpy(o, num, (size_t)nn);
                o += nn;
                p += strlen(RANK_FIELD);
            } else {
                *o++ = *p++;
            }
        }
        *o = '\0';
        return out;
    }
    /* os.path.splitext of the file name: the last dot, not a leading one */
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    if (dot) {
        const char *p = base;
        while (p < dot && *p == '.')
            p++;
        if (p == dot) /* only dots before it: no extension */
            dot = NULL;
    }
    size_t stem = dot ? (size_t)(dot - path) : len;
    char *out = malloc(len + sizeof ".rank" + (size_t)nn);
    if (!out)
        return NULL;
    sprintf(out, "%.*s.rank%s%s", (int)stem, path, num, dot ? dot : "");
    return out;
}

char *gt_env_rank_path(const char *path)
{
    const char *r = getenv("RANK");
    if (r) {
        while (*r == ' ')
            r++;
    }
    if (r && *r && strspn(r, "0123456789 ") == strlen(r) && strlen(r) < 18)
        return gt_rank_path(path, strtoll(r, NULL, 10));
    return strdup(path);
}

/* ---- rank sets ----------------------------------------------------------- */

static int add(gt_rank_set *s, size_t *cap, const char *path)
{
    if (s->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        gt_rank_trace *v = realloc(s->v, nc * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        *cap = nc;
    }
    gt_rank_trace *t = &s->v[s->n];
    memset(t, 0, sizeof *t);
    t->rank = -1;
    if (!(t->path = strdup(path)))
        return -1;
    s->n++;
    return 0;
}

static int is_sqlite_file(const char *path)
{
    struct stat st;
    char head[16];
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    return got == sizeof head && !memcmp(head, "SQLite format 3", 16);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Add the SQLite files directly in `dir`, by name. 0, -1 out of memory,
 * -2 after printing why the directory cannot be read. */
static int add_dir(gt_rank_set *s, size_t *cap, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "gradtrace: cannot read directory %s: %s\n", dir, strerror(errno));
        return -2;
    }
    char **names = NULL;
    size_t n = 0, ncap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        size_t need = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(need);
        if (!p) {
            rc = -1;
            break;
        }
        snprintf(p, need, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", e->d_name);
        if (!is_sqlite_file(p)) {
            free(p);
            continue;
        }
        if (n == ncap) {
            ncap = ncap ? ncap * 2 : 16;
            char **v = realloc(names, ncap * sizeof *v);
            if (!v) {
                free(p);
                rc = -1;
                break;
            }
            names = v;
        }
        names[n++] = p;
    }
    closedir(d);
    if (rc == 0 && n == 0) {
        fprintf(stderr, "gradtrace: no traces in directory %s\n", dir);
        rc = -2;
    }
    if (rc == 0)
        qsort(names, n, sizeof *names, cmp_name);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0 && add(s, cap, names[i]) < 0)
            rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

static int cmp_rank(const void *a, const void *b)
{
    const gt_rank_trace *x = a, *y = b;
    if (x->has_rank != y->has_rank)
        return x->has_rank ? -1 : 1;
    if (x->has_rank && x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return strcmp(x->path, y->path);
}

int gt_rank_set_load(int npaths, char **paths, gt_rank_set *out)
{
    gt_rank_set s = {0, NULL};
    size_t cap = 0;
    int rc = 0;
    for (int i = 0; i < npaths && rc == 0; i++) {
        struct stat st;
        if (stat(paths[i], &st) == 0 && S_ISDIR(st.st_mode))
            rc = add_dir(&s, &cap, paths[i]);
        else
            rc = add(&s, &cap, paths[i]);
    }
    for (size_t i = 0; i < s.n && rc == 0; i++) {
        char err[1024];
        gt_trace *t = NULL;
        if (gt_trace_open(s.v[i].path, &t, err, sizeof err) != GT_OK) {
            fprintf(stderr, "gradtrace: %s\n", err);
            rc = -2;
            break;
        }
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(gt_trace_db(t), "SELECT rank FROM run", -1, &st, NULL) ==
                SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
            s.v[i].rank = sqlite3_column_int64(st, 0);
            s.v[i].has_rank = 1;
        }
        sqlite3_finalize(st);
        gt_trace_close(t);
    }
    if (rc == -1)
        fprintf(stderr, "gradtrace: out of memory\n");
    if (rc) {
        gt_rank_set_release(&s);
        return 2;
    }
    qsort(s.v, s.n, sizeof *s.v, cmp_rank);
    *out = s;
    return 0;
}

void gt_rank_set_release(gt_rank_set *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i].path);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

void gt_format_ranks(const int64_t *ranks, size_t n, char *buf, size_t len)
{
    size_t off = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
            j++;
        int w;
        if (j > i)
            w = snprintf(buf + off, len - off, "%s%lld-%lld", i ? ", " : "",
                         (long long)ranks[i], (long long)ranks[j]);
        else
            w = snprintf(buf + off, len - off, "%s%lld", i ? ", " : "", (long long)ranks[i]);
        if (w < 0 || (size_t)w >= len - off) {
            buf[len - 1] = '\0';
            return;
        }
        off += (size_t)w;
        i = j + 1;
    }
}

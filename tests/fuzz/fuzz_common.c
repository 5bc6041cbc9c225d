/* What the trace reader's libFuzzer harnesses share; see fuzz_common.h. */
#include "fuzz_common.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

void __sanitizer_set_report_fd(void *fd);

typedef struct harness {
    char dir[64];      /* private temp directory */
    char db[96];       /* dir/t.db: the path the commands open */
    sqlite3 *hold;     /* keeps the shared memdb database alive between inputs */
    sqlite3_file *mem; /* its file: gtf_load writes each input there */
    int file;          /* H.db, the real file */
    int devnull;
    int saved_out;
    int saved_err;
    int verbose;
    int profile;
} harness;

static harness H;

static void cleanup(void)
{
    sqlite3_close(H.hold);
    unlink(H.db);
    rmdir(H.dir);
}

static void die(const char *what, const char *why)
{
    fprintf(stderr, "fuzz: %s: %s\n", what, why);
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* No allocation statistics: they take a global mutex on every SQLite
     * malloc and free, and nothing here reads them. */
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    if (gtf_mem_install() != 0)
        die("sqlite3_config", "cannot set SQLite's allocator");
    /* No bulk page-cache allocation per cache (20 pages, 87 KB, made again
     * for each of the ~20 ephemeral tables a diagnosis sorts or groups
     * through): under ASan each is a large allocation with its page faults;
     * pages then come one at a time, as SQLite documents for N = 0. */
    sqlite3_config(SQLITE_CONFIG_PAGECACHE, (void *)0, 0, 0);
    /* The real file lives in memory too where the system offers a tmpfs
     * (/dev/shm) and TMPDIR names no other place: on a disk file system
     * each input's truncation and write was block I/O charged to the
     * fuzzer (ext4 flushes a file truncated to 0 when it is closed). */
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(H.dir, sizeof H.dir, "%s/gtfuzz.XXXXXX", tmp);
    if (!mkdtemp(H.dir))
        die("mkdtemp", H.dir);
    snprintf(H.db, sizeof H.db, "%s/t.db", H.dir);
    atexit(cleanup);

    /* memdb as the default VFS: an open of an absolute path is a database
     * in memory that every connection of the process naming that path
     * shares (memdbOpen), so gt_trace_open(H.db) reads what gtf_load left
     * there. Temp databases (the TEMP views) are private memdb ones. */
    sqlite3_vfs *memdb = sqlite3_vfs_find("memdb");
    if (!memdb || sqlite3_vfs_register(memdb, 1) != SQLITE_OK)
        die("memdb", "SQLite was built without sqlite3_deserialize");
    if (sqlite3_open_v2(H.db, &H.hold, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                        NULL) != SQLITE_OK ||
        sqlite3_file_control(H.hold, "main", SQLITE_FCNTL_FILE_POINTER, &H.mem) !=
            SQLITE_OK ||
        !H.mem || !H.mem->pMethods)
        die("cannot open the memdb database", sqlite3_errmsg(H.hold));

    H.verbose = getenv("GT_FUZZ_VERBOSE") != NULL;
    H.profile = getenv("GT_FUZZ_PROFILE") != NULL;
    H.file = open(H.db, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (H.file < 0)
        die("cannot create", H.db);
    H.devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    H.saved_out = dup(STDOUT_FILENO);
    H.saved_err = dup(STDERR_FILENO);
    if (H.devnull < 0 || H.saved_out < 0 || H.saved_err < 0)
        die("dup", "cannot save stdout/stderr");
    __sanitizer_set_report_fd((void *)(intptr_t)H.saved_err);
    return 0;
}

const char *gtf_path(void)
{
    return H.db;
}

int gtf_load(const uint8_t *data, size_t size)
{
    if (size > 256u << 20)
        return -1;
    /* The file: gt_trace_open stats it and reads its header itself, and
     * nothing reads more of it (SQLite reads the memdb copy): its first
     * bytes and its size; past them whatever an earlier input left, or a
     * hole (writing all of it cost the kernel a page per 4 KB of every
     * input; truncating it to 0 first, a flush on every close). */
    size_t head = size < 512 ? size : 512;
    if (pwrite(H.file, data, head, 0) != (ssize_t)head ||
        ftruncate(H.file, (off_t)size) != 0)
        return -1;
    /* The database SQLite reads: truncate the shared memdb file, write the
     * input at offset 0 (no connection holds a lock between inputs). */
    const sqlite3_io_methods *m = H.mem->pMethods;
    if (m->xTruncate(H.mem, 0) != SQLITE_OK)
        return -1;
    if (size && m->xWrite(H.mem, data, (int)size, 0) != SQLITE_OK)
        return -1;
    return 0;
}

uint32_t gtf_hash(const uint8_t *data, size_t size)
{
    /* about 1024 bytes spread over the input (all of it through the
     * instrumented loop cost 6% of the diagnose harness) */
    size_t step = size / 1024 + 1;
    uint32_t h = 2166136261u ^ (uint32_t)size;
    for (size_t i = 0; i < size; i += step)
        h = (h ^ data[i]) * 16777619u;
    return h;
}

static void silence(int on)
{
    if (H.verbose)
        return;
    fflush(stdout);
    fflush(stderr);
    dup2(on ? H.devnull : H.saved_out, STDOUT_FILENO);
    dup2(on ? H.devnull : H.saved_err, STDERR_FILENO);
}

int gtf_run(int (*cmd)(int, char **), int argc, const char *const *args)
{
    char *argv[16];
    char store[16][512];
    if (argc > 15)
        die("gtf_run", "too many arguments");
    for (int i = 0; i < argc; i++) {
        /* getopt may permute argv and sql writes into its --param values:
         * give each call its own writable copy. */
        snprintf(store[i], sizeof store[i], "%s", args[i]);
        argv[i] = store[i];
    }
    argv[argc] = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long long live = gtf_mem_live();
    silence(1);
    int st = cmd(argc, argv);
    silence(0);
    if (gtf_mem_live() != live) {
        fprintf(stderr, "fuzz: %s left %lld SQLite allocations behind (a leak)\n",
                args[0], gtf_mem_live() - live);
        abort();
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (H.profile)
        fprintf(stderr, "%8.2f ms  %s %s\n",
                (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6, args[0],
                args[argc - 1]);
    if (st < 0 || st > 2) {
        fprintf(stderr, "fuzz: %s returned %d\n", args[0], st);
        abort();
    }
    return st;
}

/* ---- structure-aware mutation ------------------------------------------
 *
 * Byte flips in an SQLite file mostly give "database disk image is
 * malformed", which the door refuses at once. Every other input is instead
 * mutated as a trace: loaded into an in-memory database, changed by one to
 * three SQL statements that break the rows' relations the way a damaged or
 * hostile trace would (an id pointing nowhere or into a cycle, a version or
 * size out of range, a wrong type, an enormous string, a deleted or
 * duplicated row), and written back. */

/* Columns worth breaking: ids, versions, sizes, JSON and text. */
static const struct {
    const char *table, *column;
} targets[] = {
    {"saved_tensors", "tensor"},
    {"saved_tensors", "node"},
    {"saved_tensors", "version"},
    {"saved_tensors", "slot"},
    {"saved_tensors", "nbytes"},
    {"saved_tensors", "is_output"},
    {"edges", "next"},
    {"edges", "node"},
    {"edges", "input_nr"},
    {"stacks", "parent"},
    {"stacks", "frame"},
    {"stacks", "user_frame"},
    {"frames", "file"},
    {"frames", "line"},
    {"frames", "code"},
    {"frames", "function"},
    {"ops", "name"},
    {"ops", "stack"},
    {"ops", "phase"},
    {"ops", "thread"},
    {"op_args", "tensor"},
    {"op_args", "version"},
    {"op_args", "role"},
    {"op_args", "op"},
    {"version_bumps", "version"},
    {"version_bumps", "tensor"},
    {"version_bumps", "op"},
    {"tensors", "shape"},
    {"tensors", "strides"},
    {"tensors", "storage_offset"},
    {"tensors", "alias_of"},
    {"tensors", "version_counter"},
    {"tensors", "dtype"},
    {"tensors", "storage"},
    {"tensors", "is_leaf"},
    {"tensors", "created_by"},
    {"nodes", "op"},
    {"nodes", "sequence_nr"},
    {"nodes", "variable"},
    {"nodes", "name"},
    {"node_outputs", "tensor"},
    {"node_outputs", "node"},
    {"backward_calls", "seq"},
    {"backward_calls", "end_seq"},
    {"backward_calls", "status"},
    {"backward_calls", "api"},
    {"backward_calls", "stack"},
    {"backward_roots", "node"},
    {"backward_roots", "tensor"},
    {"backward_roots", "backward"},
    {"backward_inputs", "tensor"},
    {"node_execs", "node"},
    {"node_execs", "backward"},
    {"errors", "message"},
    {"errors", "backward"},
    {"errors", "stack"},
    {"errors", "type"},
    {"strings", "text"},
    {"names", "tensor"},
    {"names", "name"},
    {"storages", "nbytes"},
    {"run", "status"},
    {"run", "argv"},
    {"run", "exit_code"},
    {"run", "start_ns"},
};

static unsigned next_rand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffff;
}

/* A value for column c of a row: SQL text in buf. */
static void pick_value(unsigned *s, const char *c, char *buf, size_t n)
{
    switch (next_rand(s) % 16) {
    case 0:
        snprintf(buf, n, "NULL");
        break;
    case 1:
        snprintf(buf, n, "0");
        break;
    case 2:
        snprintf(buf, n, "-1");
        break;
    case 3:
        snprintf(buf, n, "9223372036854775807");
        break;
    case 4:
        snprintf(buf, n, "-9223372036854775807 - 1");
        break;
    case 5:
        snprintf(buf, n, "%s + 1", c);
        break;
    case 6:
        snprintf(buf, n, "-%s", c);
        break;
    case 7:
        snprintf(buf, n, "'x''\"<&>\n'");
        break;
    case 8:
        snprintf(buf, n, "printf('%%.*c', %u, 'z')", 1000 + next_rand(s) % 200000);
        break;
    case 9:
        snprintf(buf, n, "x'00ff'");
        break;
    case 10:
        snprintf(buf, n, "'[%u,-1,9223372036854775807'", next_rand(s) % 9);
        break;
    case 11:
        snprintf(buf, n, "1e308");
        break;
    default:
        snprintf(buf, n, "%u", next_rand(s) % 200);
        break; /* likely an id */
    }
}

/* The mutator's database: one connection for the process, and one buffer
 * of max_size bytes each input is copied into and changed in place. The
 * buffer does not grow (no SQLITE_DESERIALIZE_RESIZEABLE) and the database
 * may hold no more pages than fit in max_size (max_page_count), so a change
 * that would make the trace larger than libFuzzer takes fails at once with
 * SQLITE_FULL: before, it was built in full (a 200 KB string in every row of
 * a table, its index updated, the database grown by realloc, serialized
 * into a copy) and then dropped for being too large, and a fresh connection
 * and copies of the input cost large allocations and their page faults on
 * every call: a third of the diagnose harness's time (perf). (Not
 * SQLITE_LIMIT_LENGTH: SQLite 3.40's printf grows its buffer by one
 * character at a time once past half of that limit.) */
static struct {
    sqlite3 *db;
    unsigned char *buf;
    size_t cap;
} MU;

static void mutator_close(void)
{
    sqlite3_close(MU.db);
    free(MU.buf);
    MU.db = NULL;
    MU.buf = NULL;
    MU.cap = 0;
}

/* A connection whose buffer holds max_size bytes: 0, or -1. */
static int mutator_open(size_t max_size)
{
    static int registered;
    if (MU.db && MU.cap >= max_size)
        return 0;
    mutator_close(); /* a larger max_size: a new buffer, a new connection */
    if (!registered) {
        atexit(mutator_close);
        registered = 1;
    }
    if (!(MU.buf = malloc(max_size)) || sqlite3_open(":memory:", &MU.db) != SQLITE_OK) {
        mutator_close();
        return -1;
    }
    MU.cap = max_size;
    return 0;
}

static size_t sql_mutate(uint8_t *data, size_t size, size_t max_size, unsigned seed)
{
    if (size > max_size || max_size > INT_MAX)
        return 0;
    if (mutator_open(max_size) != 0)
        return 0;
    memcpy(MU.buf, data, size);
    if (sqlite3_deserialize(MU.db, "main", MU.buf, (sqlite3_int64)size,
                            (sqlite3_int64)MU.cap, 0) != SQLITE_OK)
        return 0;
    /* pages past max_size: SQLITE_FULL as the page is allocated (not at
     * commit, once the whole change is built in the page cache) */
    unsigned page = size >= 18 ? (unsigned)data[16] << 8 | data[17] : 0;
    if (page == 1)
        page = 65536;
    if (page >= 512) {
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA max_page_count = %zu", max_size / page);
        sqlite3_exec(MU.db, pragma, NULL, NULL, NULL);
    }
    unsigned s = seed;
    int changed = 0, n = 1 + (int)(next_rand(&s) % 3);
    for (int k = 0; k < n; k++) {
        size_t t = next_rand(&s) % (sizeof targets / sizeof targets[0]);
        const char *tb = targets[t].table, *c = targets[t].column;
        unsigned off = next_rand(&s) % 40;
        char val[96], sql[512];
        unsigned what = next_rand(&s) % 10;
        if (what == 0) {
            snprintf(sql, sizeof sql,
                     "DELETE FROM %s WHERE %s IS (SELECT %s FROM %s "
                     "LIMIT 1 OFFSET %u)",
                     tb, c, c, tb, off);
        } else if (what == 1) {
            snprintf(sql, sizeof sql,
                     "INSERT OR IGNORE INTO %s SELECT * FROM %s "
                     "LIMIT 1 OFFSET %u",
                     tb, tb, off);
        } else {
            pick_value(&s, c, val, sizeof val);
            snprintf(sql, sizeof sql,
                     "UPDATE OR IGNORE %s SET %s = %s WHERE %s IS "
                     "(SELECT %s FROM %s LIMIT 1 OFFSET %u)%s",
                     tb, c, val, c, c, tb, off, what == 2 ? " OR 1" : "");
        }
        if (sqlite3_exec(MU.db, sql, NULL, NULL, NULL) == SQLITE_OK &&
            sqlite3_changes(MU.db) > 0)
            changed = 1;
    }
    if (!changed)
        return 0;
    /* the buffer itself (memdb's, written in place): no copy */
    sqlite3_int64 sz = 0;
    unsigned char *img = sqlite3_serialize(MU.db, "main", &sz, SQLITE_SERIALIZE_NOCOPY);
    if (!img || sz <= 0 || (size_t)sz > max_size)
        return 0;
    memcpy(data, img, (size_t)sz);
    return (size_t)sz;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed)
{
    if (seed % 2 == 0 && size >= 512) {
        size_t n = sql_mutate(data, size, max_size, seed);
        if (n)
            return n;
    }
    return LLVMFuzzerMutate(data, size, max_size);
}

#!/usr/bin/env python3
"""Make the fuzzer's seed corpus from real traces.

    make_corpus.py -o OUTDIR TRACE.db [TRACE.db ...]

For every real trace (recorded by `gradtrace record`), OUTDIR gets:

  * the trace itself, compacted (rollback journal, 1 KiB pages, VACUUM), so
    byte-level mutations land on structure rather than free space;
  * logical mutations made with SQL, each in its own file: dangling ids
    (rows pointing at tensors, nodes, frames, stacks, strings and backward
    calls that do not exist), cycles in stacks.parent and in the autograd
    graph (edges), negative and huge versions and sequence numbers, enormous
    strings, strings that try to break out of DOT/SVG/JSON/terminal quoting,
    invalid UTF-8, wrong types in integer columns, missing or replaced
    tables and views, zero or odd run rows, newer and zero schema versions;
  * byte-level mutations: bytes flipped at random places (fixed seed),
    truncations at page boundaries and in the middle of pages.

Everything is deterministic: the same traces give the same corpus.
"""
import argparse
import os
import random
import shutil
import sqlite3
import sys

BIG = 9223372036854775807

# name -> SQL run on a copy of the trace. Statements that do not apply to a
# given trace (a table without rows) just change nothing.
MUTATIONS = {
    # dangling ids
    "dangling_saved_tensor": "UPDATE saved_tensors SET tensor = tensor + 1000000",
    "dangling_saved_node": "UPDATE saved_tensors SET node = node + 1000000",
    "dangling_op_args": "UPDATE op_args SET tensor = tensor + 1000000 WHERE role = 2",
    "dangling_bumps": "UPDATE version_bumps SET tensor = tensor + 1000000, op = op + 1000000",
    "dangling_edges": "UPDATE edges SET next = next + 1000000",
    "dangling_roots": "UPDATE backward_roots SET node = node + 1000000, "
                      "tensor = tensor + 1000000",
    "dangling_node_op": "UPDATE nodes SET op = op + 1000000, variable = variable + 1000000",
    "dangling_stacks": "UPDATE ops SET stack = stack + 1000000; "
                       "UPDATE backward_calls SET stack = stack + 1000000; "
                       "UPDATE errors SET stack = stack + 1000000",
    "dangling_frames": "UPDATE stacks SET frame = frame + 1000000, "
                       "user_frame = user_frame + 1000000",
    "dangling_strings": "UPDATE frames SET file = file + 1000000, code = code + 1000000, "
                        "function = function + 1000000; "
                        "UPDATE nodes SET name = name + 1000000",
    "dangling_op_names": "UPDATE ops SET name = name + 1000000",
    "dangling_storage": "UPDATE tensors SET storage = storage + 1000000, "
                        "alias_of = id + 1000000, version_counter = version_counter + 1000000",
    "dangling_backward": "UPDATE errors SET backward = 77; "
                         "UPDATE node_execs SET backward = backward + 1000; "
                         "UPDATE backward_roots SET backward = backward + 1000",
    "dangling_names": "UPDATE names SET tensor = tensor + 1000000, name = name + 1000000",
    "dangling_threads": "UPDATE ops SET thread = thread + 1000000; "
                        "UPDATE nodes SET thread = thread + 1000000",
    "deleted_tensors": "DELETE FROM tensors",
    "deleted_nodes": "DELETE FROM nodes",
    "deleted_strings": "DELETE FROM strings",
    "deleted_frames": "DELETE FROM frames",
    # cycles
    "stack_self_cycle": "UPDATE stacks SET parent = id",
    "stack_two_cycle": "UPDATE stacks SET parent = (SELECT max(id) FROM stacks) "
                       "WHERE id = (SELECT min(id) FROM stacks); "
                       "UPDATE stacks SET parent = (SELECT min(id) FROM stacks) "
                       "WHERE id = (SELECT max(id) FROM stacks)",
    "stack_long_cycle": "UPDATE stacks SET parent = id + 1; "
                        "UPDATE stacks SET parent = (SELECT min(id) FROM stacks) "
                        "WHERE id = (SELECT max(id) FROM stacks)",
    "edge_self_loop": "INSERT OR REPLACE INTO edges SELECT id, 900, id, 0 FROM nodes",
    "edge_cycle_to_root": "INSERT OR REPLACE INTO edges "
                          "SELECT n.id, 901, r.node, 0 FROM nodes n, backward_roots r",
    "edge_all_to_all": "INSERT OR REPLACE INTO edges SELECT a.id, 1000 + b.id, b.id, 0 "
                       "FROM nodes a, nodes b WHERE a.id <= (SELECT min(id) + 40 FROM nodes) "
                       "AND b.id <= (SELECT min(id) + 40 FROM nodes)",
    "alias_cycle": "UPDATE tensors SET alias_of = id, shares_version = 1",
    "alias_two_cycle": "UPDATE tensors SET alias_of = (SELECT max(id) FROM tensors), "
                       "shares_version = 1 WHERE id = (SELECT min(id) FROM tensors); "
                       "UPDATE tensors SET alias_of = (SELECT min(id) FROM tensors), "
                       "shares_version = 1 WHERE id = (SELECT max(id) FROM tensors)",
    "backward_root_is_leaf_cycle": "UPDATE nodes SET variable = (SELECT min(id) FROM tensors)",
    # versions and numbers
    "negative_versions": "UPDATE saved_tensors SET version = -5; "
                         "UPDATE version_bumps SET version = -version; "
                         "UPDATE op_args SET version = -1",
    "huge_versions": "UPDATE saved_tensors SET version = %d; "
                     "UPDATE version_bumps SET version = %d - seq; "
                     "UPDATE op_args SET version = %d" % (BIG, BIG, -BIG - 1),
    "min_versions": "UPDATE saved_tensors SET version = %d; "
                    "UPDATE version_bumps SET version = %d" % (-BIG - 1, -BIG - 1),
    "huge_seq": "UPDATE backward_calls SET seq = %d, end_seq = %d; "
                "UPDATE nodes SET sequence_nr = %d, seq = %d" % (BIG, -BIG - 1, BIG, -BIG - 1),
    "reversed_backward": "UPDATE backward_calls SET seq = end_seq, end_seq = seq",
    "huge_ids": "UPDATE backward_calls SET id = %d "
                "WHERE id = (SELECT max(id) FROM backward_calls)" % BIG,
    "huge_shapes": "UPDATE tensors SET shape = '[%d,%d,-1]', strides = '[1e308,\"x\",null]', "
                   "storage_offset = %d; UPDATE storages SET nbytes = %d; "
                   "UPDATE saved_tensors SET nbytes = %d" % (BIG, BIG, -BIG - 1, BIG, BIG),
    "bad_json": "UPDATE tensors SET shape = '[1,2', strides = 'not json'; "
                "UPDATE run SET argv = '{\"a\":', options = '[[[[['",
    "huge_line_numbers": "UPDATE frames SET line = %d" % BIG,
    "negative_line_numbers": "UPDATE frames SET line = -1",
    "bad_phase_role": "UPDATE ops SET phase = 99; UPDATE op_args SET role = role + 40",
    "duplicate_roots": "INSERT OR REPLACE INTO backward_roots "
                       "SELECT backward, pos + 1, tensor, node FROM backward_roots",
    "many_backward_calls": "INSERT INTO backward_calls (seq, end_seq, api, retain_graph, "
                           "create_graph, thread, stack, status) "
                           "SELECT seq + 1, end_seq, api, 1, 1, thread, stack, 'ok' "
                           "FROM backward_calls, (SELECT 1 UNION SELECT 2 UNION SELECT 3)",
    # strings
    "enormous_strings": "UPDATE strings SET text = printf('%.*c', 300000, 'x') "
                        "WHERE id IN (SELECT name FROM ops LIMIT 3) "
                        "OR id IN (SELECT code FROM frames LIMIT 3) "
                        "OR id IN (SELECT file FROM frames LIMIT 1); "
                        "UPDATE errors SET message = printf('%.*c', 400000, 'e')",
    "hostile_strings": "UPDATE strings SET text = text || "
                       "'\"; <script>alert(1)</script> ]]> & \\\\N \\\\\" {} | ' || "
                       "char(10) || char(13) || char(27) || '[31m' || char(0) || 'tail' "
                       "|| ' $(touch /tmp/gt_pwned) `id` ''; DROP TABLE run; --'",
    "invalid_utf8": "UPDATE strings SET text = CAST(x'c328ffe282a8f09f98' AS TEXT) || text; "
                    "UPDATE errors SET message = CAST(x'80808080fe' AS TEXT)",
    "blob_strings": "UPDATE strings SET text = x'00010203ff'",
    "empty_strings": "UPDATE strings SET text = ''",
    "text_in_int_columns": "UPDATE ops SET name = 'aten::mul_', stack = 'x'; "
                           "UPDATE saved_tensors SET version = 'zero', tensor = 1.5; "
                           "UPDATE edges SET next = x'01'",
    "null_everywhere": "UPDATE saved_tensors SET tensor = NULL; UPDATE edges SET next = NULL; "
                       "UPDATE nodes SET op = NULL, sequence_nr = NULL; "
                       "UPDATE backward_calls SET end_seq = NULL, stack = NULL",
    # run row and schema
    "no_run_row": "DELETE FROM run",
    "running": "UPDATE run SET status = 'running', end_ns = NULL, exit_code = NULL; "
               "UPDATE backward_calls SET status = 'running', end_seq = NULL",
    "odd_status": "UPDATE run SET status = 'exploded', exit_code = -99, signal = 999; "
                  "UPDATE backward_calls SET status = 'maybe'",
    "schema_newer": "PRAGMA user_version = 2",
    "schema_zero": "PRAGMA user_version = 0",
    "schema_negative": "PRAGMA user_version = -1",
    "dropped_edges": "DROP TABLE edges",
    "dropped_saved": "DROP TABLE saved_tensors",
    "dropped_ops": "DROP TABLE ops",
    "dropped_views": "DROP VIEW IF EXISTS invalidations; DROP VIEW IF EXISTS op_log; "
                     "DROP VIEW IF EXISTS stack_frames",
    # Not here: a trace whose view is replaced by an endless recursive query
    # (DROP VIEW op_log; CREATE VIEW op_log AS WITH RECURSIVE ...): the views
    # live in the trace, so `gradtrace sql` and `info` (backward_log,
    # error_log) run the file's definitions and hang. Reported; see
    # RELIABILITY-draft.md.
    "replaced_view": "DROP VIEW IF EXISTS tensor_info; "
                     "CREATE VIEW tensor_info AS SELECT 1 AS id, x'00ff' AS dtype",
    "renamed_column": "PRAGMA writable_schema = ON; "
                      "UPDATE sqlite_schema SET sql = replace(sql, 'version ', 'v ') "
                      "WHERE name = 'saved_tensors'",
    "extra_columns": "ALTER TABLE ops ADD COLUMN extra TEXT DEFAULT 'x'; "
                     "ALTER TABLE run ADD COLUMN extra BLOB",
    "dropped_indexes": "SELECT 1",  # indexes dropped below, by name
}


# --quick: the mutations the bounded CI run starts from (one or two of each
# kind, of the first trace only; byte mutations of every trace).
QUICK = ("dangling_saved_tensor", "dangling_stacks", "dangling_strings", "dangling_edges",
         "stack_two_cycle", "edge_cycle_to_root", "negative_versions", "huge_versions",
         "huge_shapes", "hostile_strings", "invalid_utf8", "text_in_int_columns",
         "null_everywhere", "no_run_row", "dropped_edges", "schema_newer")


def compact(path):
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = DELETE")
    db.execute("PRAGMA page_size = 1024")
    db.execute("VACUUM")
    db.close()


def mutate_sql(src, dst, name, sql):
    shutil.copyfile(src, dst)
    db = sqlite3.connect(dst, isolation_level=None)
    db.execute("PRAGMA foreign_keys = OFF")
    try:
        if name == "dropped_indexes":
            for (idx,) in db.execute("SELECT name FROM sqlite_schema WHERE type = 'index' "
                                     "AND sql IS NOT NULL").fetchall():
                db.execute('DROP INDEX "%s"' % idx.replace('"', '""'))
        else:
            db.executescript(sql)
        db.execute("VACUUM")
    except sqlite3.Error as e:
        db.close()
        os.unlink(dst)
        sys.stderr.write("make_corpus: %s: %s skipped (%s)\n" % (os.path.basename(src),
                                                                  name, e))
        return False
    db.close()
    return True


def mutate_bytes(data, rng, n):
    b = bytearray(data)
    for _ in range(n):
        # skip the 100-byte header half the time: corrupt pages, not just
        # the header every reader checks first
        lo = 100 if rng.random() < 0.5 and len(b) > 200 else 0
        i = rng.randrange(lo, len(b))
        b[i] = rng.choice((0x00, 0xff, 0x7f, 0x80, rng.randrange(256), b[i] ^ 0x01))
    return bytes(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--quick", action="store_true",
                    help="a small corpus: the QUICK mutations of the first trace")
    ap.add_argument("traces", nargs="+")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(20261130)
    made = 0
    for src in args.traces:
        base = os.path.splitext(os.path.basename(src))[0]
        clean = os.path.join(args.out, base + ".db")
        if os.path.exists(clean):
            os.unlink(clean)
        # through SQLite, so a killed recording's write-ahead log is included
        s, d = sqlite3.connect(src), sqlite3.connect(clean)
        s.backup(d)
        s.close()
        d.close()
        compact(clean)
        made += 1
        for name, sql in MUTATIONS.items():
            if args.quick and (src != args.traces[0] or name not in QUICK):
                continue
            made += mutate_sql(clean, os.path.join(args.out, "%s.%s.db" % (base, name)),
                               name, sql)
        data = open(clean, "rb").read()
        for k in range(3 if args.quick else 12):
            with open(os.path.join(args.out, "%s.bytes%02d.db" % (base, k)), "wb") as f:
                f.write(mutate_bytes(data, rng, 1 + k * 3))
            made += 1
        page = 1024
        cuts = sorted({page, 2 * page, len(data) // 2, len(data) // 2 + 17,
                       len(data) - page, len(data) - 1, 100, 16})
        for cut in cuts[-2:] if args.quick else cuts:
            if 0 < cut < len(data):
                with open(os.path.join(args.out, "%s.cut%d.db" % (base, cut)), "wb") as f:
                    f.write(data[:cut])
                made += 1
    print("make_corpus: %d files in %s" % (made, args.out))


if __name__ == "__main__":
    main()

"""How big a closed trace would be under other table layouts: the design
experiment behind schema/SCHEMA.md "Size and speed".

    python3 bench/schema_layouts.py [ops]      (default 200000)

Writes bench_writer's mix (per op: 1 op row, 3 tensor arguments, 0.3 version
bumps, 0.5 saved tensors) into a fresh SQLite file per layout with Python's
sqlite3, creates that layout's indexes, VACUUMs, and prints the file size per
op and the biggest tables and indexes (from dbstat, where SQLite has it):

  rows_full_index     v1 as gradtrace 0.1.0 wrote it: a row per argument and
                      the close-time index op_args (tensor, op)
  rows_written_index  v1 now: the index holds written arguments only
  json_columns        arguments packed into the op row as JSON arrays
                      (inputs, input_versions, outputs, mutated)
  json_triples        arguments as one JSON array [[role, tensor, version]..]
  blob_varints        arguments as an opaque BLOB of varints
  blob_varints_saved  the same, and saved_tensors clustered by node

Not part of bench/run: it measures formats we do not write. Prints
`name: value unit` lines.
"""
import json
import os
import random
import sqlite3
import sys
import tempfile

OPS = ("CREATE TABLE ops(seq INTEGER PRIMARY KEY, name INT NOT NULL, phase INT NOT NULL, "
       "grad_mode INT NOT NULL, thread INT NOT NULL, stack INT{extra});")
ARGS = ("CREATE TABLE op_args(op INT NOT NULL, role INT NOT NULL, pos INT NOT NULL, "
        "tensor INT NOT NULL, version INT NOT NULL, PRIMARY KEY(op, role, pos)) WITHOUT ROWID;")
BUMPS = ("CREATE TABLE version_bumps(seq INTEGER PRIMARY KEY, op INT, tensor INT NOT NULL, "
         "version INT NOT NULL, observed INT NOT NULL DEFAULT 0);")
SAVED = ("CREATE TABLE saved_tensors(seq INTEGER PRIMARY KEY, node INT NOT NULL, "
         "slot INT NOT NULL, tensor INT, version INT NOT NULL, is_output INT NOT NULL, "
         "nbytes INT);")
SAVED_BY_NODE = ("CREATE TABLE saved_tensors(node INT NOT NULL, seq INT NOT NULL, "
                 "slot INT NOT NULL, tensor INT, version INT NOT NULL, is_output INT NOT NULL, "
                 "nbytes INT, PRIMARY KEY(node, seq)) WITHOUT ROWID;")
IDX = ("CREATE INDEX vb ON version_bumps(tensor, seq);"
       "CREATE INDEX st ON saved_tensors(tensor);")
IDX_NODE = "CREATE INDEX sn ON saved_tensors(node);"


def varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def compact(v):
    return json.dumps(v, separators=(",", ":"))


def events(n):
    """bench_writer's mix: (kind, seq, ...) in recording order."""
    seq, tensor = 0, 1
    for i in range(n):
        seq += 1
        op = seq
        yield "op", op, tensor
        if i % 10 < 3:
            seq += 1
            yield "bump", seq, op, tensor
        if i % 2 == 0:
            seq += 1
            yield "saved", seq, i + 1, tensor
        tensor += 2


def op_row(db, layout, op, t, rnd):
    head = (op, rnd.randrange(1, 300), 0, 1, 1, rnd.randrange(1, 4000))
    args = [(0, 0, t, 0), (0, 1, t + 1, 2), (1, 0, t + 2, 0)]  # role, pos, tensor, version
    if layout.startswith("rows"):
        db.execute("INSERT INTO ops VALUES (?,?,?,?,?,?)", head)
        db.executemany("INSERT INTO op_args VALUES (?,?,?,?,?)",
                       [(op, r, p, tt, v) for r, p, tt, v in args])
    elif layout == "json_columns":
        db.execute("INSERT INTO ops VALUES (?,?,?,?,?,?,?,?,?,?)",
                   head + (compact([t, t + 1]), compact([0, 2]), compact([t + 2]), None))
    elif layout == "json_triples":
        db.execute("INSERT INTO ops VALUES (?,?,?,?,?,?,?)",
                   head + (compact([[r, tt, v] for r, _, tt, v in args]),))
    else:
        blob = b"".join(varint(tt) + varint(v) + bytes([r << 4 | p]) for r, p, tt, v in args)
        db.execute("INSERT INTO ops VALUES (?,?,?,?,?,?,?)", head + (blob,))


LAYOUTS = {
    "rows_full_index": (OPS.format(extra="") + ARGS + BUMPS + SAVED,
                        IDX + IDX_NODE + "CREATE INDEX oa ON op_args(tensor, op);"),
    "rows_written_index": (OPS.format(extra="") + ARGS + BUMPS + SAVED,
                           IDX + IDX_NODE +
                           "CREATE INDEX oa ON op_args(tensor, op) WHERE role = 2;"),
    "json_columns": (OPS.format(extra=", inputs TEXT, input_versions TEXT, outputs TEXT, "
                                      "mutated TEXT") + BUMPS + SAVED, IDX + IDX_NODE),
    "json_triples": (OPS.format(extra=", args TEXT") + BUMPS + SAVED, IDX + IDX_NODE),
    "blob_varints": (OPS.format(extra=", args BLOB") + BUMPS + SAVED, IDX + IDX_NODE),
    "blob_varints_saved": (OPS.format(extra=", args BLOB") + BUMPS + SAVED_BY_NODE, IDX),
}


def measure(layout, n, where):
    ddl, idx = LAYOUTS[layout]
    path = os.path.join(where, layout + ".db")
    db = sqlite3.connect(path)
    db.executescript(ddl)
    rnd = random.Random(1)
    by_node = layout == "blob_varints_saved"
    db.execute("BEGIN")
    for e in events(n):
        if e[0] == "op":
            op_row(db, layout, e[1], e[2], rnd)
        elif e[0] == "bump":
            db.execute("INSERT INTO version_bumps VALUES (?,?,?,1,0)", (e[1], e[2], e[3]))
        else:
            _, seq, node, t = e
            row = (node, seq, 7, t) if by_node else (seq, node, 7, t)
            db.execute("INSERT INTO saved_tensors VALUES (?,?,?,?,0,0,4096)", row)
    db.execute("COMMIT")
    db.executescript(idx)
    db.execute("VACUUM")
    try:
        parts = db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name "
                           "ORDER BY 2 DESC LIMIT 6").fetchall()
    except sqlite3.OperationalError:  # SQLite built without dbstat
        parts = []
    db.close()
    size = os.path.getsize(path)
    os.remove(path)
    print(f"bytes_per_op.{layout}: {size / n:.1f} bytes")
    for name, nbytes in parts:
        print(f"bytes_per_op.{layout}.{name}: {nbytes / n:.1f} bytes")


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
    with tempfile.TemporaryDirectory() as where:
        for layout in LAYOUTS:
            measure(layout, n, where)


if __name__ == "__main__":
    main()

-- Views over the raw tables: the stable, documented way to query a trace
-- (schema/SCHEMA.md, "## Views", lists every column). Created in every trace
-- with IF NOT EXISTS. Raw tables may grow; these views keep their names and
-- columns (new columns are only ever appended).
--
-- Rules that keep them usable from any SQLite client (the sqlite3 shell,
-- Python's sqlite3 and pandas, DuckDB's sqlite scanner, which reprints a
-- view in its own dialect before SQLite runs it: keep to SQL both parse, and
-- give columns one type, e.g. CASE ... THEN 1 ELSE 0 rather than a bare
-- comparison, which DuckDB reads as BOOLEAN; WITH RECURSIVE does not survive
-- the reprint, so backward_reach and invalidations need sqlite_query there):
--   * plain SQL and SQLite's built-in functions only, no custom functions;
--   * no ORDER BY inside a view: add your own (ORDER BY seq is the order in
--     which things happened);
--   * a "location" (file, line, function, code) is always the innermost frame
--     of the USER's code on the stack of the event (stacks.user_frame), NULL
--     when the event had no Python stack or no user frame on it;
--   * `names` columns are the user's variable names bound to any tensor that
--     shares the tensor's version counter (views and detach() of one tensor
--     are one variable for autograd), joined with ', ' in the order they were
--     first seen, NULL if none.

-- Where each interned stack is in the user's code: the innermost user frame
-- (stacks.user_frame) of stack `stack`, all NULL when it has none. The
-- location columns of the other views come from here.
CREATE VIEW IF NOT EXISTS locations AS
SELECT st.id AS stack,
       ff.text AS file,
       fr.line,
       fn.text AS function,
       fc.text AS code
FROM stacks st
LEFT JOIN frames fr ON fr.id = st.user_frame
LEFT JOIN strings ff ON ff.id = fr.file
LEFT JOIN strings fn ON fn.id = fr.function
LEFT JOIN strings fc ON fc.id = fr.code;

-- One row per op the engine ran.
CREATE VIEW IF NOT EXISTS op_log AS
SELECT o.seq,
       so.text AS op,
       p.name AS phase,
       o.grad_mode,
       o.thread,
       l.file,
       l.line,
       l.function,
       l.code,
       o.stack
FROM ops o
JOIN strings so ON so.id = o.name
JOIN phases p ON p.id = o.phase
LEFT JOIN locations l ON l.stack = o.stack;

-- One row per frame of every interned stack: depth 0 is the innermost frame.
-- is_user is 1 for frames of the user's code. Filter by stack
-- (op_log.stack, backward_log.stack, error_log.stack, ...).
CREATE VIEW IF NOT EXISTS stack_frames AS
WITH RECURSIVE walk(stack, depth, node) AS (
    SELECT id, 0, id FROM stacks
    UNION ALL
    SELECT w.stack, w.depth + 1, s.parent
    FROM walk w JOIN stacks s ON s.id = w.node
    WHERE s.parent IS NOT NULL
      -- a damaged trace may hold a cycle: no real stack is deeper than
      -- the number of stacks
      AND w.depth < (SELECT count(*) FROM stacks)
)
SELECT w.stack,
       w.depth,
       s.frame,
       ff.text AS file,
       fr.line,
       fn.text AS function,
       fc.text AS code,
       CASE WHEN s.user_frame = s.frame THEN 1 ELSE 0 END AS is_user
FROM walk w
JOIN stacks s ON s.id = w.node
JOIN frames fr ON fr.id = s.frame
LEFT JOIN strings ff ON ff.id = fr.file
LEFT JOIN strings fn ON fn.id = fr.function
LEFT JOIN strings fc ON fc.id = fr.code;

-- One row per (variable name, tensor) binding the recorder saw.
CREATE VIEW IF NOT EXISTS variables AS
SELECT sn.text AS name,
       n.tensor,
       n.seq,
       t.version_counter,
       t.storage,
       sd.text AS dtype,
       t.shape
FROM names n
JOIN strings sn ON sn.id = n.name
LEFT JOIN tensors t ON t.id = n.tensor
LEFT JOIN strings sd ON sd.id = t.dtype;

-- One row per tensor, with its storage, creating op and variable names.
CREATE VIEW IF NOT EXISTS tensor_info AS
SELECT t.id AS tensor,
       t.seq,
       sd.text AS dtype,
       t.shape,
       t.strides,
       t.storage_offset,
       t.storage,
       sdev.text AS device,
       sg.nbytes AS storage_nbytes,
       t.requires_grad,
       t.is_leaf,
       t.alias_of,
       t.shares_version,
       t.version_counter,
       t.created_by,
       so.text AS created_by_op,
       (SELECT group_concat(name, ', ') FROM (
            SELECT sn.text AS name, min(n.seq) AS first
            FROM tensors t2
            JOIN names n ON n.tensor = t2.id
            JOIN strings sn ON sn.id = n.name
            WHERE t2.version_counter = t.version_counter
            GROUP BY sn.text ORDER BY first, name)) AS names,
       l.file,
       l.line,
       l.function,
       l.code
FROM tensors t
LEFT JOIN strings sd ON sd.id = t.dtype
LEFT JOIN storages sg ON sg.id = t.storage
LEFT JOIN strings sdev ON sdev.id = sg.device
LEFT JOIN ops o ON o.seq = t.created_by
LEFT JOIN strings so ON so.id = o.name
LEFT JOIN locations l ON l.stack = o.stack;

-- One row per version bump (an in-place write to a tensor's version
-- counter), with the op and the user line that did it.
CREATE VIEW IF NOT EXISTS mutations AS
SELECT b.seq,
       b.op AS op_seq,
       so.text AS op,
       b.tensor,
       t.storage,
       t.version_counter,
       COALESCE(
           (SELECT a.version FROM op_args a
            WHERE a.op = b.op AND a.role = 2 AND a.tensor = b.tensor LIMIT 1),
           (SELECT b2.version FROM version_bumps b2
            JOIN tensors t2 ON t2.id = b2.tensor
            WHERE t2.version_counter = t.version_counter AND b2.seq < b.seq
            ORDER BY b2.seq DESC LIMIT 1),
           b.version - 1) AS version_before,
       b.version AS version_after,
       b.observed,
       l.file,
       l.line,
       l.function,
       l.code,
       (SELECT group_concat(name, ', ') FROM (
            SELECT sn.text AS name, min(n.seq) AS first
            FROM tensors t2
            JOIN names n ON n.tensor = t2.id
            JOIN strings sn ON sn.id = n.name
            WHERE t2.version_counter = t.version_counter
            GROUP BY sn.text ORDER BY first, name)) AS names
FROM version_bumps b
LEFT JOIN tensors t ON t.id = b.tensor
LEFT JOIN ops o ON o.seq = b.op
LEFT JOIN strings so ON so.id = o.name
LEFT JOIN locations l ON l.stack = o.stack;

-- One row per tensor saved for backward by an autograd node. The location
-- is the user line of the op that created the node (the line that saved it).
CREATE VIEW IF NOT EXISTS saved AS
SELECT s.seq,
       s.node,
       sn.text AS node_name,
       ss.text AS slot,
       s.tensor,
       sd.text AS dtype,
       t.shape,
       s.nbytes,
       s.version AS saved_version,
       s.is_output,
       t.storage,
       t.version_counter,
       nd.op AS op_seq,
       so.text AS op,
       (SELECT group_concat(name, ', ') FROM (
            SELECT sv.text AS name, min(n.seq) AS first
            FROM tensors t2
            JOIN names n ON n.tensor = t2.id
            JOIN strings sv ON sv.id = n.name
            WHERE t2.version_counter = t.version_counter
            GROUP BY sv.text ORDER BY first, name)) AS names,
       l.file,
       l.line,
       l.function,
       l.code
FROM saved_tensors s
JOIN nodes nd ON nd.id = s.node
JOIN strings sn ON sn.id = nd.name
JOIN strings ss ON ss.id = s.slot
LEFT JOIN tensors t ON t.id = s.tensor
LEFT JOIN strings sd ON sd.id = t.dtype
LEFT JOIN ops o ON o.seq = nd.op
LEFT JOIN strings so ON so.id = o.name
LEFT JOIN locations l ON l.stack = o.stack;

-- Bytes held by saved tensors, one row per node type.
CREATE VIEW IF NOT EXISTS saved_memory AS
SELECT sn.text AS node_name,
       count(DISTINCT s.node) AS nodes,
       count(*) AS saved,
       count(DISTINCT s.tensor) AS tensors,
       COALESCE(sum(s.nbytes), 0) AS nbytes,
       max(s.nbytes) AS max_nbytes
FROM saved_tensors s
JOIN nodes nd ON nd.id = s.node
JOIN strings sn ON sn.id = nd.name
GROUP BY sn.text;

-- The nodes each backward call reaches: its roots' grad_fn nodes and every
-- node reachable from them along edges. depth is the shortest edge distance.
CREATE VIEW IF NOT EXISTS backward_reach AS
WITH RECURSIVE reach(backward, node, depth) AS (
    SELECT backward, node, 0 FROM backward_roots WHERE node IS NOT NULL
    UNION
    SELECT r.backward, e.next, r.depth + 1
    FROM reach r JOIN edges e ON e.node = r.node
    WHERE e.next IS NOT NULL
      -- depth makes rows on a cycle (a damaged trace) distinct: bound it by
      -- the number of nodes, which no path in a real graph exceeds
      AND r.depth < (SELECT count(*) FROM nodes)
)
SELECT r.backward, r.node, sn.text AS node_name, min(r.depth) AS depth
FROM reach r
JOIN nodes nd ON nd.id = r.node
JOIN strings sn ON sn.id = nd.name
GROUP BY r.backward, r.node;

-- The diagnosis in SQL: every saved tensor whose version counter moved
-- between its save and the moment a backward call reached its node, with one
-- row per version bump in between (mutation columns are NULL if the counter
-- moved without a recorded bump). The same pairs `gradtrace diagnose` reports
-- as inplace_invalidated_saved:
--   * a backward call reaches every node reachable from its roots' nodes
--     along edges;
--   * it reaches a node when the node ran (node_execs.seq), or at the call
--     itself when that was not recorded;
--   * the counter's value then is the largest value seen for it after the
--     save: a bump, or a version an op saw on an argument;
--   * nodes whose saved tensors an earlier backward call already freed (it
--     ran them without retain_graph or create_graph) are left out: that is
--     "backward through the graph a second time", not an in-place change.
-- file/line/function/code locate the mutation; saved_* the line that saved
-- the tensor; backward_* the backward call.
CREATE VIEW IF NOT EXISTS invalidations AS
WITH RECURSIVE reach(backward, node) AS (
    SELECT backward, node FROM backward_roots WHERE node IS NOT NULL
    UNION
    SELECT r.backward, e.next
    FROM reach r JOIN edges e ON e.node = r.node
    WHERE e.next IS NOT NULL
),
-- when each backward call ran each node, and the last node it ran
execs AS (
    SELECT backward, node, min(seq) AS seq FROM node_execs GROUP BY backward, node
),
last_exec AS (
    SELECT backward, max(seq) AS seq FROM node_execs GROUP BY backward
),
-- the first backward call that freed each node's saved tensors: it ran the
-- node (all of its graph if it returned and node runs were not recorded),
-- except the node where it raised (its last run)
freed(node, backward) AS (
    SELECT r.node, min(b.id)
    FROM reach r
    JOIN backward_calls b ON b.id = r.backward
    LEFT JOIN last_exec le ON le.backward = b.id
    LEFT JOIN execs x ON x.backward = b.id AND x.node = r.node
    WHERE b.retain_graph = 0 AND b.create_graph = 0
      AND CASE WHEN le.seq IS NOT NULL
          THEN x.seq IS NOT NULL AND (b.status = 'ok' OR x.seq < le.seq)
          ELSE b.status = 'ok' END
    GROUP BY r.node
),
reached AS (
    SELECT r.backward, r.node, b.stack AS backward_stack, b.seq AS backward_seq,
           COALESCE(x.seq, b.seq) AS at_seq
    FROM reach r
    JOIN backward_calls b ON b.id = r.backward
    LEFT JOIN execs x ON x.backward = r.backward AND x.node = r.node
    LEFT JOIN freed f ON f.node = r.node
    WHERE f.backward IS NULL OR f.backward >= r.backward
),
checked AS (
    SELECT d.backward,
           d.backward_seq,
           d.backward_stack,
           d.at_seq,
           s.seq AS saved_seq,
           s.node,
           s.slot,
           s.tensor,
           s.version AS saved_version,
           t.version_counter,
           max(s.version,
               COALESCE((SELECT max(vb.version) FROM version_bumps vb
                         JOIN tensors tv ON tv.id = vb.tensor
                         WHERE tv.version_counter = t.version_counter
                           AND vb.seq > s.seq AND vb.seq < d.at_seq), s.version),
               COALESCE((SELECT max(a.version) FROM op_args a
                         JOIN tensors ta ON ta.id = a.tensor
                         WHERE ta.version_counter = t.version_counter
                           AND a.role = 2
                           AND a.op > s.seq AND a.op < d.at_seq), s.version))
               AS version_at_backward
    FROM reached d
    JOIN saved_tensors s ON s.node = d.node AND s.seq < d.at_seq
    JOIN tensors t ON t.id = s.tensor
),
-- the saved tensors whose counter moved, and the bumps in between
stale AS (
    SELECT * FROM checked WHERE version_at_backward <> saved_version
),
stale_bumps AS (
    SELECT c.backward, c.saved_seq, m.seq, m.op, m.tensor, m.version
    FROM stale c
    JOIN tensors tm ON tm.version_counter = c.version_counter
    JOIN version_bumps m ON m.tensor = tm.id
                        AND m.seq > c.saved_seq AND m.seq < c.at_seq
)
SELECT c.backward,
       c.backward_seq,
       bl.file AS backward_file,
       bl.line AS backward_line,
       c.node,
       sn.text AS node_name,
       c.saved_seq,
       ss.text AS slot,
       c.tensor,
       (SELECT group_concat(name, ', ') FROM (
            SELECT sv.text AS name, min(n.seq) AS first
            FROM tensors t2
            JOIN names n ON n.tensor = t2.id
            JOIN strings sv ON sv.id = n.name
            WHERE t2.version_counter = c.version_counter
            GROUP BY sv.text ORDER BY first, name)) AS names,
       c.saved_version,
       c.version_at_backward,
       sl.file AS saved_file,
       sl.line AS saved_line,
       sl.code AS saved_code,
       m.seq AS mutation_seq,
       m.op AS op_seq,
       mo.text AS op,
       m.tensor AS mutated_tensor,
       m.version AS version_after,
       l.file,
       l.line,
       l.function,
       l.code
FROM stale c
JOIN nodes nd ON nd.id = c.node
JOIN strings sn ON sn.id = nd.name
JOIN strings ss ON ss.id = c.slot
LEFT JOIN locations bl ON bl.stack = c.backward_stack
LEFT JOIN ops so ON so.seq = nd.op
LEFT JOIN locations sl ON sl.stack = so.stack
LEFT JOIN stale_bumps m ON m.backward = c.backward AND m.saved_seq = c.saved_seq
LEFT JOIN ops o ON o.seq = m.op
LEFT JOIN strings mo ON mo.id = o.name
LEFT JOIN locations l ON l.stack = o.stack;

-- One row per event that touched a tensor. kind is one of: created (first
-- seen; op is the op that output it), read (an op's input), written (an
-- op's mutated argument; version is the value before the op), bump (its
-- version counter moved; version is the value after), saved (saved for
-- backward; op is the node name, detail the slot), name (bound to a
-- variable; detail is the name), root (a backward call started from it; op
-- is the API). Filter by tensor, or by version_counter for all its aliases.
CREATE VIEW IF NOT EXISTS tensor_history AS
SELECT t.id AS tensor, t.version_counter, t.seq, 'created' AS kind,
       so.text AS op, NULL AS version, NULL AS detail,
       l.file, l.line, l.function, l.code
FROM tensors t
LEFT JOIN ops o ON o.seq = t.created_by
LEFT JOIN strings so ON so.id = o.name
LEFT JOIN locations l ON l.stack = o.stack
UNION ALL
SELECT a.tensor, t.version_counter, a.op,
       CASE a.role WHEN 0 THEN 'read' ELSE 'written' END,
       so.text, a.version, NULL,
       l.file, l.line, l.function, l.code
FROM op_args a
JOIN ops o ON o.seq = a.op
JOIN strings so ON so.id = o.name
LEFT JOIN tensors t ON t.id = a.tensor
LEFT JOIN locations l ON l.stack = o.stack
WHERE a.role IN (0, 2)
UNION ALL
SELECT b.tensor, t.version_counter, b.seq, 'bump',
       so.text, b.version, CASE WHEN b.observed THEN 'observed' END,
       l.file, l.line, l.function, l.code
FROM version_bumps b
LEFT JOIN tensors t ON t.id = b.tensor
LEFT JOIN ops o ON o.seq = b.op
LEFT JOIN strings so ON so.id = o.name
LEFT JOIN locations l ON l.stack = o.stack
UNION ALL
SELECT s.tensor, t.version_counter, s.seq, 'saved',
       sn.text, s.version, ss.text,
       l.file, l.line, l.function, l.code
FROM saved_tensors s
JOIN nodes nd ON nd.id = s.node
JOIN strings sn ON sn.id = nd.name
JOIN strings ss ON ss.id = s.slot
LEFT JOIN tensors t ON t.id = s.tensor
LEFT JOIN ops o ON o.seq = nd.op
LEFT JOIN locations l ON l.stack = o.stack
WHERE s.tensor IS NOT NULL
UNION ALL
SELECT n.tensor, t.version_counter, n.seq, 'name',
       so.text, NULL, sv.text,
       l.file, l.line, l.function, l.code
FROM names n
JOIN strings sv ON sv.id = n.name
LEFT JOIN tensors t ON t.id = n.tensor
LEFT JOIN ops o ON o.seq = n.seq
LEFT JOIN strings so ON so.id = o.name
LEFT JOIN locations l ON l.stack = o.stack
UNION ALL
SELECT r.tensor, t.version_counter, b.seq, 'root',
       sa.text, NULL, 'backward ' || b.id,
       l.file, l.line, l.function, l.code
FROM backward_roots r
JOIN backward_calls b ON b.id = r.backward
JOIN strings sa ON sa.id = b.api
LEFT JOIN tensors t ON t.id = r.tensor
LEFT JOIN locations l ON l.stack = b.stack
WHERE r.tensor IS NOT NULL;

-- One row per backward call: how it was called, how it ended, from where.
CREATE VIEW IF NOT EXISTS backward_log AS
SELECT b.id,
       b.seq,
       b.end_seq,
       sa.text AS api,
       b.status,
       b.retain_graph,
       b.create_graph,
       (SELECT count(*) FROM backward_roots r WHERE r.backward = b.id) AS roots,
       (SELECT count(*) FROM backward_inputs i WHERE i.backward = b.id) AS inputs,
       (SELECT count(*) FROM node_execs x WHERE x.backward = b.id) AS nodes_run,
       (SELECT se.text FROM errors e JOIN strings se ON se.id = e.type
        WHERE e.backward = b.id ORDER BY e.seq LIMIT 1) AS error_type,
       (SELECT e.message FROM errors e
        WHERE e.backward = b.id ORDER BY e.seq LIMIT 1) AS error,
       l.file,
       l.line,
       l.function,
       l.code,
       b.stack
FROM backward_calls b
JOIN strings sa ON sa.id = b.api
LEFT JOIN locations l ON l.stack = b.stack;

-- One row per exception the recorder saw.
CREATE VIEW IF NOT EXISTS error_log AS
SELECT e.seq,
       se.text AS type,
       e.message,
       e.backward,
       l.file,
       l.line,
       l.function,
       l.code,
       e.stack
FROM errors e
JOIN strings se ON se.id = e.type
LEFT JOIN locations l ON l.stack = e.stack;

-- The autograd graph's edges with node names on both ends.
CREATE VIEW IF NOT EXISTS graph_edges AS
SELECT e.node,
       sa.text AS node_name,
       e.pos,
       e.next,
       sb.text AS next_name,
       e.input_nr
FROM edges e
JOIN nodes na ON na.id = e.node
JOIN strings sa ON sa.id = na.name
LEFT JOIN nodes nb ON nb.id = e.next
LEFT JOIN strings sb ON sb.id = nb.name;

-- Every event of the trace, one row per seq, whatever its kind: op, tensor,
-- bump, node, saved, backward, backward_end, node_exec, error. what names it
-- (op name, dtype+shape, node name, node.slot, API, end status, error type);
-- tensor and node are set where they apply. The location is the event's
-- user line, as elsewhere (a backward_end has its call's).
CREATE VIEW IF NOT EXISTS events AS
SELECT u.seq, u.kind, u.what, u.tensor, u.node,
       l.file, l.line, l.function, l.code, u.stack
FROM (
SELECT o.seq, 'op' AS kind, so.text AS what, NULL AS tensor, NULL AS node,
       o.stack AS stack
FROM ops o JOIN strings so ON so.id = o.name
UNION ALL
SELECT t.seq, 'tensor', sd.text || t.shape, t.id, NULL, o.stack
FROM tensors t
LEFT JOIN strings sd ON sd.id = t.dtype
LEFT JOIN ops o ON o.seq = t.created_by
UNION ALL
SELECT b.seq, 'bump', so.text, b.tensor, NULL, o.stack
FROM version_bumps b
LEFT JOIN ops o ON o.seq = b.op
LEFT JOIN strings so ON so.id = o.name
UNION ALL
SELECT nd.seq, 'node', sn.text, NULL, nd.id, o.stack
FROM nodes nd
JOIN strings sn ON sn.id = nd.name
LEFT JOIN ops o ON o.seq = nd.op
UNION ALL
SELECT s.seq, 'saved', sn.text || '.' || ss.text, s.tensor, s.node, o.stack
FROM saved_tensors s
JOIN nodes nd ON nd.id = s.node
JOIN strings sn ON sn.id = nd.name
JOIN strings ss ON ss.id = s.slot
LEFT JOIN ops o ON o.seq = nd.op
UNION ALL
SELECT b.seq, 'backward', sa.text, NULL, NULL, b.stack
FROM backward_calls b JOIN strings sa ON sa.id = b.api
UNION ALL
SELECT b.end_seq, 'backward_end', b.status, NULL, NULL, b.stack
FROM backward_calls b WHERE b.end_seq IS NOT NULL
UNION ALL
SELECT x.seq, 'node_exec', sn.text, NULL, x.node, NULL
FROM node_execs x
JOIN nodes nd ON nd.id = x.node
JOIN strings sn ON sn.id = nd.name
UNION ALL
SELECT e.seq, 'error', se.text, NULL, NULL, e.stack
FROM errors e JOIN strings se ON se.id = e.type
) u
LEFT JOIN locations l ON l.stack = u.stack;

-- v3: one row per write of an op into a tensor argument (op_args role
-- 'mutated'), whether or not it moved the version counter: c10d's in-place
-- collectives (all_reduce, broadcast, ...) write without a bump, which
-- `mutations` (one row per bump) cannot show.
CREATE VIEW IF NOT EXISTS writes AS
SELECT a.op AS op_seq,
       so.text AS op,
       a.pos,
       a.tensor,
       t.storage,
       t.version_counter,
       a.version AS version_before,
       b.version AS version_after,
       CASE WHEN b.seq IS NULL THEN 0 ELSE 1 END AS bumped,
       l.file,
       l.line,
       l.function,
       l.code,
       (SELECT group_concat(name, ', ') FROM (
            SELECT sn.text AS name, min(n.seq) AS first
            FROM tensors t2
            JOIN names n ON n.tensor = t2.id
            JOIN strings sn ON sn.id = n.name
            WHERE t2.version_counter = t.version_counter
            GROUP BY sn.text ORDER BY first, name)) AS names
FROM op_args a
JOIN ops o ON o.seq = a.op
LEFT JOIN strings so ON so.id = o.name
LEFT JOIN tensors t ON t.id = a.tensor
LEFT JOIN version_bumps b ON b.op = a.op AND b.tensor = a.tensor
LEFT JOIN locations l ON l.stack = o.stack
WHERE a.role = 2;

-- One row per saved tensor with what it holds in memory: its own bytes,
-- its storage's, how many saved tensors hold that storage, and whether it
-- is the first of them (by seq). counted_bytes counts each storage once,
-- with its first saved tensor (a saved tensor with no recorded storage
-- counts its own bytes): sum(counted_bytes) is what every saved tensor of
-- the trace holds together. gradtrace memory reads the same per backward
-- call (the nodes it reaches, each storage once within them).
CREATE VIEW IF NOT EXISTS saved_bytes AS
SELECT u.seq,
       u.node,
       u.node_name,
       u.slot,
       u.tensor,
       u.storage,
       u.nbytes,
       u.storage_nbytes,
       u.storage_saved,
       u.first_on_storage,
       CASE WHEN u.first_on_storage = 1
            THEN coalesce(u.storage_nbytes, u.nbytes, 0) ELSE 0 END AS counted_bytes,
       l.file,
       l.line,
       l.function,
       l.code
FROM (
SELECT s.seq,
       s.node,
       sn.text AS node_name,
       ss.text AS slot,
       s.tensor,
       t.storage,
       s.nbytes,
       sg.nbytes AS storage_nbytes,
       CASE WHEN t.storage IS NULL THEN 1
            ELSE (SELECT count(*) FROM tensors t2
                  JOIN saved_tensors s2 ON s2.tensor = t2.id
                  WHERE t2.storage = t.storage) END AS storage_saved,
       CASE WHEN t.storage IS NULL THEN 1
            WHEN EXISTS (SELECT 1 FROM tensors t2
                         JOIN saved_tensors s2 ON s2.tensor = t2.id
                         WHERE t2.storage = t.storage AND s2.seq < s.seq) THEN 0
            ELSE 1 END AS first_on_storage,
       o.stack
FROM saved_tensors s
JOIN nodes nd ON nd.id = s.node
JOIN strings sn ON sn.id = nd.name
JOIN strings ss ON ss.id = s.slot
LEFT JOIN tensors t ON t.id = s.tensor
LEFT JOIN storages sg ON sg.id = t.storage
LEFT JOIN ops o ON o.seq = nd.op
) u
LEFT JOIN locations l ON l.stack = u.stack;

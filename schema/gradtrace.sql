-- gradtrace trace schema, version 5 (schema/CHANGES.md says what each
-- version added).
--
-- This file is the single source of the trace format. It is compiled into the
-- recorder library (see CMakeLists.txt) and executed when a trace is created;
-- the schema version lives in PRAGMA user_version and in run.schema_version.
-- Every column is documented in schema/SCHEMA.md. The format only ever grows:
-- new tables and columns, never a changed meaning (schema/CHANGES.md).
--
-- Conventions
--   * Every event row (ops, version_bumps, saved_tensors, backward_calls,
--     errors, names, node_execs) carries `seq`, drawn from one counter shared
--     by all event kinds: strictly increasing in recording order, starting at 1.
--   * All ids are integers. Strings (op names, dtypes, file names, function
--     names, code lines, slot names, variable names) are interned in `strings`.
--   * Small enumerations are integers with a lookup table (`phases`, `roles`).
--   * No indexes beyond primary keys exist while recording; the recorder
--     creates the inspector's indexes (indexes.sql) when it closes the trace.

CREATE TABLE run (
    id                INTEGER PRIMARY KEY CHECK (id = 1),
    gradtrace_version TEXT NOT NULL,
    schema_version    INTEGER NOT NULL,
    engine            TEXT,
    engine_version    TEXT,
    python_version    TEXT,
    argv              TEXT,            -- JSON array of strings
    cwd               TEXT,
    pid               INTEGER,
    rank              INTEGER,         -- distributed rank, NULL if none
    host              TEXT,
    start_ns          INTEGER NOT NULL, -- wall clock, ns since the Unix epoch
    end_ns            INTEGER,          -- NULL while running or if killed
    status            TEXT NOT NULL DEFAULT 'running',
                                        -- running | ok | exception | signal
    exit_code         INTEGER,
    signal            INTEGER,
    options           TEXT,             -- JSON object: recording options used
    stopped_seq       INTEGER,          -- v2: recording stopped early (size
                                        -- cap) after this event seq; NULL if
                                        -- it went on to the end
    stopped_reason    TEXT,             -- v2: why it stopped, e.g.
                                        -- 'size cap: 225280 bytes > max_bytes 204800'
    local_rank        INTEGER,          -- v3: rank on its host (LOCAL_RANK), NULL if none
    world_size        INTEGER,          -- v3: number of ranks, NULL if not distributed
    backend           TEXT,             -- v3: process group backend ('gloo', 'nccl'),
                                        -- NULL until init_process_group ran
    launcher_run_id   TEXT,             -- v3: the launcher's run id
                                        -- (TORCHELASTIC_RUN_ID), NULL if none
    keep_last         INTEGER,          -- v4: flight recorder (--keep-last N):
                                        -- N; NULL for a whole-run trace
    kept_from_seq     INTEGER,          -- v4: events before this seq were
                                        -- dropped, but for the rows the kept
                                        -- ones reference; NULL if none dropped
    kept_from_backward INTEGER          -- v4: backward calls before this id
                                        -- were dropped; NULL if none
);

CREATE TABLE strings (
    id   INTEGER PRIMARY KEY,
    text TEXT NOT NULL
);

CREATE TABLE phases (
    id   INTEGER PRIMARY KEY,
    name TEXT NOT NULL
);
INSERT INTO phases VALUES (0, 'forward'), (1, 'backward'), (2, 'other');

CREATE TABLE roles (
    id   INTEGER PRIMARY KEY,
    name TEXT NOT NULL
);
INSERT INTO roles VALUES (0, 'input'), (1, 'output'), (2, 'mutated');

CREATE TABLE threads (
    id     INTEGER PRIMARY KEY,
    os_tid INTEGER,
    name   TEXT
);

CREATE TABLE frames (
    id       INTEGER PRIMARY KEY,
    file     INTEGER NOT NULL,   -- strings.id
    line     INTEGER NOT NULL,
    function INTEGER NOT NULL,   -- strings.id
    code     INTEGER             -- strings.id of the source line, NULL if unknown
);

-- Call stacks interned as a tree: a stack is its parent (the callers) plus
-- its innermost frame. user_frame is the innermost frame of this stack that
-- belongs to the user's code (not the engine, not gradtrace).
CREATE TABLE stacks (
    id         INTEGER PRIMARY KEY,
    parent     INTEGER,          -- stacks.id, NULL for an outermost frame
    frame      INTEGER NOT NULL, -- frames.id
    user_frame INTEGER,          -- frames.id, NULL if no user frame
    module     INTEGER           -- v5: strings.id of the module path of the
                                 -- frame's `self` when it is an nn.Module
                                 -- ('layer3.1', '' for the outermost
                                 -- module called), NULL otherwise
);

CREATE TABLE ops (
    seq       INTEGER PRIMARY KEY,
    name      INTEGER NOT NULL,  -- strings.id, e.g. 'aten::mul_.Tensor'
    phase     INTEGER NOT NULL,  -- phases.id
    grad_mode INTEGER NOT NULL,  -- 1 if grad mode was enabled
    thread    INTEGER NOT NULL,  -- threads.id
    stack     INTEGER            -- stacks.id, NULL if no Python stack
) ;

CREATE TABLE op_args (
    op      INTEGER NOT NULL,    -- ops.seq
    role    INTEGER NOT NULL,    -- roles.id: input, output, mutated
    pos     INTEGER NOT NULL,    -- position among the op's tensors of that role
    tensor  INTEGER NOT NULL,    -- tensors.id
    version INTEGER NOT NULL,    -- version counter value seen before the op
    PRIMARY KEY (op, role, pos)
) WITHOUT ROWID;

CREATE TABLE storages (
    id     INTEGER PRIMARY KEY,
    nbytes INTEGER NOT NULL,
    device INTEGER NOT NULL      -- strings.id, e.g. 'cpu'
);

CREATE TABLE tensors (
    id             INTEGER PRIMARY KEY,
    seq            INTEGER NOT NULL, -- event seq at which it was first seen
    storage        INTEGER,          -- storages.id, NULL if it has no storage
    dtype          INTEGER NOT NULL, -- strings.id, e.g. 'float32'
    shape          TEXT NOT NULL,    -- JSON array of sizes
    strides        TEXT NOT NULL,    -- JSON array, in elements
    storage_offset INTEGER NOT NULL, -- in elements
    requires_grad  INTEGER NOT NULL,
    is_leaf        INTEGER NOT NULL,
    created_by     INTEGER,          -- ops.seq that output it, NULL if unknown
    alias_of       INTEGER,          -- tensors.id it aliases (view base), or NULL
    shares_version INTEGER NOT NULL DEFAULT 0,
                                     -- 1 if it shares alias_of's version counter
    version_counter INTEGER NOT NULL -- id of its version counter: the id of the
                                     -- first tensor seen with that counter
);

CREATE TABLE version_bumps (
    seq      INTEGER PRIMARY KEY,
    op       INTEGER,                -- ops.seq that caused it, NULL if observed
    tensor   INTEGER NOT NULL,       -- tensors.id that was written
    version  INTEGER NOT NULL,       -- the counter's value after the bump
    observed INTEGER NOT NULL DEFAULT 0
                                     -- 1 if seen later rather than predicted
);

CREATE TABLE nodes (
    id          INTEGER PRIMARY KEY,
    seq         INTEGER NOT NULL,    -- event seq at which it was recorded
    name        INTEGER NOT NULL,    -- strings.id, e.g. 'MulBackward0'
    op          INTEGER,             -- ops.seq that created it, NULL if unknown
    sequence_nr INTEGER,             -- the engine's own node sequence number
    thread      INTEGER,             -- threads.id
    variable    INTEGER              -- tensors.id a leaf node accumulates into
);

CREATE TABLE edges (
    node     INTEGER NOT NULL,       -- nodes.id
    pos      INTEGER NOT NULL,       -- index in the node's next functions
    next     INTEGER,                -- nodes.id, NULL for an empty edge
    input_nr INTEGER,                -- input number of `next` the edge feeds
    PRIMARY KEY (node, pos)
) WITHOUT ROWID;

CREATE TABLE node_outputs (
    node      INTEGER NOT NULL,      -- nodes.id
    output_nr INTEGER NOT NULL,
    tensor    INTEGER NOT NULL,      -- tensors.id whose grad_fn is the node
    PRIMARY KEY (node, output_nr)
) WITHOUT ROWID;

CREATE TABLE saved_tensors (
    seq       INTEGER PRIMARY KEY,
    node      INTEGER NOT NULL,      -- nodes.id
    slot      INTEGER NOT NULL,      -- strings.id: 'self', 'other', 'result'...
    tensor    INTEGER,               -- tensors.id, NULL if not matched
    version   INTEGER NOT NULL,      -- version counter value at save
    is_output INTEGER NOT NULL,      -- 1 if it is the node's own output
    nbytes    INTEGER                -- bytes the saved tensor holds
);

-- v3: saved tensors the engine saved at an earlier event than their row's
-- seq: a non-reentrant checkpoint's inputs, saved by the call and recorded
-- as each node of the region is found (unpacking any of them first
-- unpacks the inputs). A saved tensor without a row here was saved at its
-- row's seq.
CREATE TABLE saved_earlier (
    saved     INTEGER PRIMARY KEY,   -- saved_tensors.seq
    saved_seq INTEGER NOT NULL       -- event seq at which it was saved
);

CREATE TABLE backward_calls (
    id           INTEGER PRIMARY KEY, -- 1, 2, ... in call order
    seq          INTEGER NOT NULL,    -- event seq at the call
    end_seq      INTEGER,             -- event seq when it returned or raised
    api          INTEGER NOT NULL,    -- strings.id: 'Tensor.backward',
                                      -- 'torch.autograd.backward', 'torch.autograd.grad'
    retain_graph INTEGER NOT NULL,
    create_graph INTEGER NOT NULL,
    thread       INTEGER,             -- threads.id
    stack        INTEGER,             -- stacks.id
    status       TEXT NOT NULL DEFAULT 'running' -- running | ok | error
);

CREATE TABLE backward_roots (
    backward INTEGER NOT NULL,        -- backward_calls.id
    pos      INTEGER NOT NULL,
    tensor   INTEGER,                 -- tensors.id
    node     INTEGER,                 -- nodes.id of its grad_fn
    PRIMARY KEY (backward, pos)
) WITHOUT ROWID;

CREATE TABLE backward_inputs (
    backward INTEGER NOT NULL,        -- backward_calls.id
    pos      INTEGER NOT NULL,
    tensor   INTEGER NOT NULL,        -- tensors.id (inputs= of autograd.grad)
    PRIMARY KEY (backward, pos)
) WITHOUT ROWID;

CREATE TABLE node_execs (
    seq      INTEGER PRIMARY KEY,
    backward INTEGER NOT NULL,        -- backward_calls.id
    node     INTEGER NOT NULL         -- nodes.id, executed by the engine
);

CREATE TABLE errors (
    seq      INTEGER PRIMARY KEY,
    type     INTEGER NOT NULL,        -- strings.id, e.g. 'RuntimeError'
    message  TEXT NOT NULL,
    stack    INTEGER,                 -- stacks.id where it was raised
    backward INTEGER                  -- backward_calls.id, NULL if outside
);

-- v3: a recorded tensor seen on another storage than before, with no op of
-- the engine's making the change (`t.data = other`, `t.set_(...)`): what a
-- node saved may now read other memory, with no version bump.
CREATE TABLE storage_swaps (
    seq         INTEGER PRIMARY KEY,  -- event seq at which it was noticed
    tensor      INTEGER NOT NULL,     -- tensors.id whose storage changed
    old_storage INTEGER,              -- storages.id before, NULL if none
    new_storage INTEGER,              -- storages.id now, NULL if none
    op          INTEGER,              -- ops.seq that saw it first, NULL if
                                      -- noticed by a backward call's check
    backward    INTEGER,              -- backward_calls.id whose start noticed
                                      -- it, NULL if an op did
    last_seen   INTEGER,              -- event seq of the last op or check that
                                      -- saw it on old_storage: the change
                                      -- happened between last_seen and seq
    stack       INTEGER               -- stacks.id where it was noticed
);

-- v3: fingerprints of saved tensors' bytes (recorded with --check-saved /
-- check_saved=True): one row at save and one when the node ran in backward.
-- Different hashes of one saved tensor: its memory was written by something
-- autograd cannot see (a NumPy view, DLPack, a custom kernel).
CREATE TABLE saved_fingerprints (
    seq     INTEGER PRIMARY KEY,      -- event seq
    saved   INTEGER NOT NULL,         -- saved_tensors.seq
    at_use  INTEGER NOT NULL,         -- 0: taken at save; 1: when the node ran
    backward INTEGER,                 -- backward_calls.id for at_use = 1
    nbytes  INTEGER NOT NULL,         -- bytes hashed (the tensor's extent)
    hash    INTEGER NOT NULL          -- XXH3 64-bit of those bytes, as signed
);

CREATE TABLE names (
    seq    INTEGER NOT NULL,          -- event seq at which the name was seen
    tensor INTEGER NOT NULL,          -- tensors.id bound to the name
    name   INTEGER NOT NULL,          -- strings.id: the variable name
    PRIMARY KEY (seq, tensor, name)
) WITHOUT ROWID;

-- v6: a write an op made into a tensor argument without moving its version
-- counter, seen after the op returned (the counter's value is the same as
-- before it): BatchNorm's running statistics in training mode and the other
-- ops of the kernel-write list (include/gradtrace/kwrites.h), arguments an
-- op's schema marks written that it did not bump (a fused optimizer's), and
-- c10d's in-place collectives. Each also has a 'mutated' op_args row.
CREATE TABLE kernel_writes (
    op      INTEGER NOT NULL,         -- ops.seq of the writing op
    tensor  INTEGER NOT NULL,         -- tensors.id written
    version INTEGER NOT NULL,         -- its counter's value, before and after
    marked  INTEGER NOT NULL,         -- 1: the op's schema marks it written
    PRIMARY KEY (op, tensor)
) WITHOUT ROWID;

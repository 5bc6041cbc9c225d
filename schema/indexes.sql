-- Indexes the inspector needs, created by gt_recorder_close (not while
-- recording, to keep inserts cheap). IF NOT EXISTS: closing twice is harmless.
-- The size cap (max_bytes) counts these ahead, entry by entry: a new index
-- here needs its entry in recorder.c's enum gt__idx and its idx_note calls.
-- Written arguments only (role 2, mutated): what the inspector looks up by
-- tensor. An index over every argument would add about 42 bytes per op
-- (30% of a trace) for lookups that a scan of op_args serves well enough.
CREATE INDEX IF NOT EXISTS op_args_written ON op_args (tensor, op) WHERE role = 2;
CREATE INDEX IF NOT EXISTS tensors_storage ON tensors (storage);
CREATE INDEX IF NOT EXISTS tensors_vc ON tensors (version_counter);
CREATE INDEX IF NOT EXISTS version_bumps_tensor ON version_bumps (tensor, seq);
CREATE INDEX IF NOT EXISTS nodes_op ON nodes (op);
CREATE INDEX IF NOT EXISTS saved_tensors_node ON saved_tensors (node);
CREATE INDEX IF NOT EXISTS saved_tensors_tensor ON saved_tensors (tensor);
CREATE INDEX IF NOT EXISTS edges_next ON edges (next);
CREATE INDEX IF NOT EXISTS names_tensor ON names (tensor);

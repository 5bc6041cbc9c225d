-- Indexes the inspector needs, created by gt_recorder_close (not while
-- recording, to keep inserts cheap). IF NOT EXISTS: closing twice is harmless.
CREATE INDEX IF NOT EXISTS op_args_tensor ON op_args (tensor, op);
CREATE INDEX IF NOT EXISTS tensors_storage ON tensors (storage);
CREATE INDEX IF NOT EXISTS tensors_vc ON tensors (version_counter);
CREATE INDEX IF NOT EXISTS version_bumps_tensor ON version_bumps (tensor, seq);
CREATE INDEX IF NOT EXISTS nodes_op ON nodes (op);
CREATE INDEX IF NOT EXISTS saved_tensors_node ON saved_tensors (node);
CREATE INDEX IF NOT EXISTS saved_tensors_tensor ON saved_tensors (tensor);
CREATE INDEX IF NOT EXISTS edges_next ON edges (next);
CREATE INDEX IF NOT EXISTS names_tensor ON names (tensor);

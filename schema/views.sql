-- Views over the raw tables (schema/SCHEMA.md documents their columns).
-- Created in every trace with IF NOT EXISTS; they keep their names and
-- columns across schema versions.
CREATE VIEW IF NOT EXISTS op_log AS
SELECT o.seq, s.text AS op, p.name AS phase, o.grad_mode
FROM ops o JOIN strings s ON s.id = o.name JOIN phases p ON p.id = o.phase;

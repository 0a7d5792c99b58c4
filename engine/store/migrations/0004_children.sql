-- 0004: fan-out and fan-in.
--
-- Why: a `children` step spawns one instance per item in the same transaction that parks the
-- parent. Each child remembers which parked attempt of its parent spawned it (parent_seq), so
-- children of an attempt that a repair has since superseded never count towards the new one.
-- A child that ends leaves a 'children' timer for its parent in the same transaction, so when the
-- signal is visible so is the ending. (Coalescing signals with a unique index was tried and lost
-- endings: a child could skip its signal in favour of one that a poller then fired before the
-- child committed.) The parent counts its children in SQL and loads their outputs only once all
-- have ended; a poller handles a burst of signals for one parent once.

ALTER TABLE workflows ADD COLUMN parent_seq integer;
DROP INDEX workflows_parent;
CREATE INDEX workflows_parent ON workflows (parent_id, parent_seq, branch_index) WHERE parent_id IS NOT NULL;

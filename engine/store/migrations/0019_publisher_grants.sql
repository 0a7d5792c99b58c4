-- 0019: each published version records the grant its publisher held.
--
-- Why: a version can do no more than its publisher (ARCHITECTURE.md, Invariants). The engine
-- checks at publish that the publisher's grant covers every handler the version calls, every
-- definition it starts as a child and every event type it is triggered by, and checks again when
-- an instance reaches one of them. The second check needs the grant, long after the request that
-- carried it: so it is stored with the version.
--
-- `grants` is the list of grants that vouched for the version, oldest first; the last one is in
-- force. The publish that creates the row writes the first. Publishing the same hash again under
-- another grant that covers what the version does appends that grant (the re-vouch, so the
-- column is its own audit trail). An empty list is a version published before this migration:
-- the engine treats it as narrowed to its own logicId until someone re-vouches for it.
-- Each entry: {"subject": <sub or null>, "scopes": [<scope>, ...] or null (the operator), "at": <iso time>}.

ALTER TABLE logic_versions ADD COLUMN grants jsonb NOT NULL DEFAULT '[]';
-- published documents stay immutable (0001 revoked UPDATE); besides `active` (0004) only the
-- vouching list may grow
GRANT UPDATE (grants) ON logic_versions TO flow_app;

-- 0004: WASM modules live in Postgres, and a published version can be retired.
--
-- Why: publishing used to mean copying `modules/<sha256>.wasm` onto every engine node and
-- restarting. Stored here, content-addressed by sha256, every node loads a module the first time
-- a step needs it, so a version published through one node runs on all of them at once. Rows are
-- per env (a version may only use modules uploaded to its own env) under the same FORCE'd
-- row-level security as every other table; bytes under a hash never change, so nobody may update
-- or delete them.
--
-- `active` drains a version: no new instance starts on a retired one, while those already pinned
-- to it run to the end. It is the only column of a published version that may change.

CREATE TABLE modules (
  env_id      text        NOT NULL,
  sha256      text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  bytes       bytea       NOT NULL,
  size        integer     NOT NULL,
  uploaded_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (env_id, sha256)
);
-- the loader looks a module up by hash alone, across envs (the hash proves the bytes)
CREATE INDEX modules_sha256 ON modules (sha256);

ALTER TABLE modules ENABLE ROW LEVEL SECURITY;
ALTER TABLE modules FORCE ROW LEVEL SECURITY;
CREATE POLICY env_isolation ON modules TO flow_app
  USING (env_id = current_setting('app.env_id', true))
  WITH CHECK (env_id = current_setting('app.env_id', true));
CREATE POLICY scheduler ON modules TO flow_engine USING (true) WITH CHECK (true);
GRANT SELECT, INSERT ON modules TO flow_app, flow_engine;

ALTER TABLE logic_versions ADD COLUMN active boolean NOT NULL DEFAULT true;
-- 0001 revoked UPDATE on logic_versions: published documents are immutable. Only the flag may move.
GRANT UPDATE (active) ON logic_versions TO flow_app;

-- The instances that have not ended, for the metrics gauges and a version's in-flight count: one
-- scrape reads this small index instead of the whole history of the table.
CREATE INDEX workflows_live ON workflows (env_id, logic_id, version, state)
  WHERE state IN ('pending', 'processing', 'waiting', 'compensating');

-- Why: publishing, retiring and reactivating a version change what every later start in the env
-- runs, and left no trace of who did it or why. Audit rows now record those acts too: such a row
-- names the version (logic_id, version) and no instance (workflow_id NULL). Rows about an instance
-- are unchanged.
ALTER TABLE audit ALTER COLUMN workflow_id DROP NOT NULL;
ALTER TABLE audit ADD COLUMN logic_id text, ADD COLUMN version integer;
ALTER TABLE audit ADD CONSTRAINT audit_names_its_subject
  CHECK (workflow_id IS NOT NULL OR (logic_id IS NOT NULL AND version IS NOT NULL));
CREATE INDEX audit_version ON audit (logic_id, version, id) WHERE workflow_id IS NULL;

-- Bulk operator jobs (the console's and `s8flow bulk`'s "retry every instance in this filter")
-- run on the server, one instance at a time, so a job survives the browser closing and records a
-- result per instance; and a NOTIFY on every instance change, which the console's live pages
-- (server-sent events) listen to instead of polling.

CREATE TABLE bulk_jobs (
  env_id      text        NOT NULL,
  id          uuid        PRIMARY KEY,
  verb        text        NOT NULL CHECK (verb IN ('retry', 'cancel', 'replay')),
  -- the instance filter the job was created from, as the listing route takes it
  filter      jsonb       NOT NULL,
  args        jsonb       NOT NULL DEFAULT '{}',
  reason      text        NOT NULL,
  actor       text        NOT NULL,
  state       text        NOT NULL CHECK (state IN ('running', 'done', 'aborted')),
  total       integer     NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz
);

CREATE TABLE bulk_job_items (
  env_id      text        NOT NULL,
  job_id      uuid        NOT NULL REFERENCES bulk_jobs (id) ON DELETE CASCADE,
  seq         integer     NOT NULL,
  workflow_id uuid        NOT NULL,
  status      text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'ok', 'failed', 'skipped')),
  -- the instance state after the verb, or the stable error code that refused it
  state       text,
  error       jsonb,
  finished_at timestamptz,
  PRIMARY KEY (job_id, seq)
);

DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['bulk_jobs', 'bulk_job_items']
  LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format($p$CREATE POLICY env_isolation ON %I TO flow_app
                     USING (env_id = current_setting('app.env_id', true))
                     WITH CHECK (env_id = current_setting('app.env_id', true))$p$, t);
    EXECUTE format('CREATE POLICY scheduler ON %I TO flow_engine USING (true) WITH CHECK (true)', t);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO flow_app, flow_engine', t);
  END LOOP;
END
$$;

-- One notification per changed instance (payload: its id), sent at commit. Postgres folds
-- identical notifications of one transaction into one, so a commit that writes the row and its
-- attempts notifies once. Listeners filter by id; nobody polls.
CREATE FUNCTION notify_workflow_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('flow_changes', NEW.id::text);
  RETURN NULL;
END
$$;

CREATE TRIGGER workflows_notify_change AFTER INSERT OR UPDATE ON workflows
  FOR EACH ROW EXECUTE FUNCTION notify_workflow_change();

-- 0009's flow_changes NOTIFY went out on every write of a workflow row, watched or not, and a
-- NOTIFY is not free. A notifying commit holds Postgres's notify lock (one per database) until its
-- WAL is flushed, so notifying commits never share an fsync (group commit): the engine flushed
-- once a step where 16 plain clients flush about once for two commits. And every connection of
-- the database that LISTENs on any channel (an engine has two: flow_work and flow_outbox) is woken
-- and runs a transaction of its own to read the queue: two commits a step that nobody asked for.
-- Measured on the bench's proxy steps (bench/commit-sources.ts): 3.2 commits and 1.0 WAL fsyncs a
-- step with it, 1.2 and 0.5 without. Now a process that streams changes (the console) registers
-- itself here while a page watches, renewing its row before it lapses, and rows are notified
-- only while a registration is live: nothing watching, nothing sent.

CREATE TABLE change_watchers (
  id    uuid        PRIMARY KEY,
  -- a watcher that died without saying so stops costing anything once this passes
  until timestamptz NOT NULL
);

-- Not an env's data: read by the trigger in whichever role writes the row (so every role may
-- read it), written by the watcher as the scheduler. RLS forced all the same, as on every table.
ALTER TABLE change_watchers ENABLE ROW LEVEL SECURITY;
ALTER TABLE change_watchers FORCE ROW LEVEL SECURITY;
CREATE POLICY readers ON change_watchers FOR SELECT USING (true);
CREATE POLICY scheduler ON change_watchers TO flow_engine USING (true) WITH CHECK (true);
GRANT SELECT ON change_watchers TO flow_app, flow_engine;
GRANT INSERT, UPDATE, DELETE ON change_watchers TO flow_engine;

CREATE OR REPLACE FUNCTION notify_workflow_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM change_watchers WHERE until > now()) THEN
    PERFORM pg_notify('flow_changes', NEW.id::text);
  END IF;
  RETURN NULL;
END
$$;

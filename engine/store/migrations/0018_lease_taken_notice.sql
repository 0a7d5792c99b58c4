-- 0018: a worker whose lease is taken from it hears so when the taking commits, not at its next
-- heartbeat.
--
-- Why: a worker pool holds up to twice its concurrency of instances, leased and `processing`, the
-- ones beyond its executors waiting in line for one. A cancel of such an instance ends the lease
-- and fences the worker's commit, but the worker learnt it only from
-- its next heartbeat, up to a third of the lease later (10 s by default): an executor that freed
-- before then ran the instance's next step, so an operator told "cancelled" could see the step's
-- effect afterwards (test/runtime/lease-taken.test.ts).
--
-- Now any update that replaces or clears a holder's lease token, other than the holder's own
-- commit (which writes its receipt, 0006, in the same update), sends NOTIFY flow_lease_taken with
-- `<id>:<old token>` at commit; the pool holding that token drops the instance before it runs
-- anything more for it. That covers every path at once: verbs, resumes and completions, a
-- parent's cancel reaching its children, a claim of an expired lease. A worker's own commits and
-- heartbeats keep or hand over their token and notify nothing, so the step path pays only the
-- trigger's WHEN test. A notice lost with the listening connection is made good by the heartbeat
-- that the pool sends on reconnecting, and by the heartbeats as before.

CREATE FUNCTION notify_lease_taken() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('flow_lease_taken', OLD.id::text || ':' || OLD.lease_token::text);
  RETURN NULL;
END
$$;

CREATE TRIGGER workflows_lease_taken AFTER UPDATE OF lease_token ON workflows
  FOR EACH ROW
  WHEN (OLD.lease_token IS NOT NULL AND NEW.lease_token IS DISTINCT FROM OLD.lease_token
        AND (NEW.commit_token IS DISTINCT FROM OLD.lease_token OR NEW.commit_version IS DISTINCT FROM NEW.row_version))
  EXECUTE FUNCTION notify_lease_taken();

-- Schedules start instances on a cron pattern in a time zone. A schedule is one row whose next
-- tick is `next_at`: the scheduler's timer loop finds due rows through one partial index, so a
-- schedule costs nothing between ticks (no poller per schedule). Each tick's outcome (started,
-- skipped, buffered) is kept in `schedule_ticks`, which is also how an operator sees the ticks
-- an outage made the schedule skip. Acts on a schedule are audited; such an audit row names the
-- schedule (schedule_id) and no instance or version.

CREATE TABLE schedules (
  env_id           text        NOT NULL,
  id               text        NOT NULL,
  logic_id         text        NOT NULL,
  -- 'declared' rows follow the definition's highest active version; 'api' rows are the operator's
  origin           text        NOT NULL CHECK (origin IN ('declared', 'api')),
  cron             text        NOT NULL,
  timezone         text        NOT NULL,
  overlap          text        NOT NULL CHECK (overlap IN ('skip', 'buffer_one', 'allow')),
  catch_up         text        NOT NULL,
  input            jsonb,
  paused           boolean     NOT NULL DEFAULT false,
  -- the next tick not yet handled; NULL when the pattern has no more
  next_at          timestamptz,
  -- a tick `buffer_one` holds until the last instance ends
  buffered_at      timestamptz,
  last_instance_id uuid,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (env_id, id)
);
CREATE INDEX schedules_due ON schedules (next_at) WHERE NOT paused AND next_at IS NOT NULL;
CREATE INDEX schedules_buffered ON schedules (env_id) WHERE NOT paused AND buffered_at IS NOT NULL;

CREATE TABLE schedule_ticks (
  env_id      text        NOT NULL,
  schedule_id text        NOT NULL,
  tick_at     timestamptz NOT NULL,
  outcome     text        NOT NULL CHECK (outcome IN ('started', 'skipped_catch_up', 'skipped_overlap', 'buffered', 'failed')),
  -- how the tick came: the timer, an operator's trigger, a backfill
  via         text        NOT NULL CHECK (via IN ('timer', 'trigger', 'backfill')),
  workflow_id uuid,
  -- why a tick could start nothing (no active version, an input the schema refuses): { code, message }
  error       jsonb,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (env_id, schedule_id, tick_at)
);

DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['schedules', 'schedule_ticks']
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

ALTER TABLE audit ADD COLUMN schedule_id text;
-- the subject may also be a schedule; limit changes (0027) keep naming their resource
ALTER TABLE audit DROP CONSTRAINT audit_names_its_subject;
ALTER TABLE audit ADD CONSTRAINT audit_names_its_subject
  CHECK (workflow_id IS NOT NULL OR (logic_id IS NOT NULL AND version IS NOT NULL) OR resource IS NOT NULL OR schedule_id IS NOT NULL);
CREATE INDEX audit_schedule ON audit (schedule_id, id) WHERE schedule_id IS NOT NULL;

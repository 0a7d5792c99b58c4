-- 0001: the durable state of the engine.
--
-- Why this shape: every transition of an instance is one UPDATE of its `workflows` row (fenced by
-- lease_token and row_version) plus the step_runs rows it writes, so a crash at any point leaves
-- either the old or the new state, never a mix. Every table carries env_id under FORCE'd row-level
-- security; the roles the engine switches to own nothing, so the policies always apply.
--
-- Names are unqualified: the migrator sets search_path to the target schema (`flow` by default,
-- a throw-away schema per test file), so the same file serves both.

DO $$
BEGIN
  -- flow_app: everything done on behalf of one environment (API calls, verbs, step commits).
  -- flow_engine: the scheduler's cross-environment reads (claiming work, firing timers, relaying).
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'flow_app') THEN
    CREATE ROLE flow_app NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'flow_engine') THEN
    CREATE ROLE flow_engine NOLOGIN;
  END IF;
EXCEPTION WHEN unique_violation OR duplicate_object THEN
  NULL; -- another migrator of another schema created them at the same moment
END
$$;

CREATE TABLE logic_versions (
  env_id       text        NOT NULL,
  logic_id     text        NOT NULL,
  version      integer     NOT NULL CHECK (version >= 1),
  hash         text        NOT NULL,
  doc          jsonb       NOT NULL,
  published_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (env_id, logic_id, version)
);

CREATE TABLE workflows (
  id               uuid        PRIMARY KEY,
  env_id           text        NOT NULL,
  domain           text        NOT NULL,
  logic_id         text        NOT NULL,
  version          integer     NOT NULL,
  logic_hash       text        NOT NULL,
  state            text        NOT NULL CHECK (state IN ('pending', 'processing', 'waiting', 'compensating',
                                 'completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')),
  input            jsonb       NOT NULL,
  output           jsonb,
  current_step     text,
  error            jsonb,
  generation       integer     NOT NULL DEFAULT 0,
  -- the core's working memory: step outputs, the prepared attempt, the compensation stack
  ctx              jsonb       NOT NULL,
  row_version      bigint      NOT NULL DEFAULT 1,
  lease_token      uuid,
  lease_expires_at timestamptz,
  -- when a pending or compensating instance may next be claimed (retry backoff lives here)
  run_at           timestamptz NOT NULL DEFAULT now(),
  correlation_id   text,
  idempotency_key  text,
  parent_id        uuid,
  -- which parked attempt of the parent spawned this child: children of an attempt a repair has
  -- since superseded never count towards the new one
  parent_seq       integer,
  branch_index     integer,
  -- receives an outbox `callback` row on every transition into a terminal state
  callback_url     text,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workflows_runnable ON workflows (run_at) WHERE state IN ('pending', 'compensating');
CREATE INDEX workflows_leased ON workflows (lease_expires_at) WHERE state IN ('processing', 'compensating');
CREATE INDEX workflows_state ON workflows (env_id, state, updated_at);
CREATE INDEX workflows_parent ON workflows (parent_id, parent_seq, branch_index) WHERE parent_id IS NOT NULL;
CREATE UNIQUE INDEX workflows_idempotency ON workflows (env_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TABLE step_runs (
  env_id          text        NOT NULL,
  workflow_id     uuid        NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
  seq             integer     NOT NULL,
  step            text        NOT NULL,
  attempt         integer     NOT NULL,
  generation      integer     NOT NULL,
  kind            text        NOT NULL CHECK (kind IN ('step', 'compensation')),
  state           text        NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'parked', 'superseded')),
  input           jsonb,
  output          jsonb,
  error           jsonb,
  idempotency_key text,
  started_at      timestamptz NOT NULL DEFAULT now(),
  finished_at     timestamptz,
  PRIMARY KEY (workflow_id, seq)
);

CREATE TABLE timers (
  env_id      text        NOT NULL,
  id          uuid        PRIMARY KEY,
  workflow_id uuid        NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
  purpose     text        NOT NULL,
  fire_at     timestamptz NOT NULL,
  payload     jsonb       NOT NULL DEFAULT '{}',
  fired_at    timestamptz
);
CREATE INDEX timers_due ON timers (fire_at) WHERE fired_at IS NULL;
CREATE INDEX timers_workflow ON timers (workflow_id);

CREATE TABLE outbox (
  env_id          text        NOT NULL,
  id              bigserial   PRIMARY KEY,
  workflow_id     uuid        REFERENCES workflows (id) ON DELETE SET NULL,
  kind            text        NOT NULL CHECK (kind IN ('event', 'callback')),
  topic           text        NOT NULL,
  payload         jsonb       NOT NULL,
  idempotency_key text        NOT NULL,
  -- where a callback row goes; event rows go to the engine's event sink
  url             text,
  attempts        integer     NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  delivered_at    timestamptz,
  -- set when the relay gave up (a permanent 4xx, or out of attempts); rows are never deleted
  failed_at       timestamptz,
  last_error      text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT outbox_callback_has_url CHECK (kind <> 'callback' OR url IS NOT NULL),
  CONSTRAINT outbox_one_outcome CHECK (delivered_at IS NULL OR failed_at IS NULL)
);
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE delivered_at IS NULL AND failed_at IS NULL;
CREATE INDEX outbox_workflow ON outbox (workflow_id);

CREATE TABLE audit (
  env_id      text        NOT NULL,
  id          bigserial   PRIMARY KEY,
  workflow_id uuid        NOT NULL,
  verb        text        NOT NULL,
  actor       text        NOT NULL,
  reason      text,
  args        jsonb       NOT NULL DEFAULT '{}',
  before      jsonb       NOT NULL,
  after       jsonb       NOT NULL,
  at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_workflow ON audit (workflow_id, id);

CREATE TABLE triggers (
  env_id   text    NOT NULL,
  event    text    NOT NULL,
  logic_id text    NOT NULL,
  PRIMARY KEY (env_id, event, logic_id)
);

CREATE TABLE events (
  env_id          text        NOT NULL,
  idempotency_key text        NOT NULL,
  type            text        NOT NULL,
  payload         jsonb       NOT NULL,
  -- the instances it started, so a repeat of its key answers with the same ids
  started         uuid[]      NOT NULL DEFAULT '{}',
  received_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (env_id, idempotency_key)
);

-- Row-level security: one policy per table for the tenant role, one for the scheduler role.
DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['logic_versions', 'workflows', 'step_runs', 'timers', 'outbox', 'audit', 'triggers', 'events']
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
-- Published versions are immutable and history is append-only, whatever the role.
REVOKE UPDATE, DELETE ON logic_versions, audit FROM flow_app, flow_engine;
DO $$
BEGIN
  EXECUTE format('GRANT USAGE ON SCHEMA %I TO flow_app, flow_engine', current_schema());
  EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO flow_app, flow_engine', current_schema());
END
$$;

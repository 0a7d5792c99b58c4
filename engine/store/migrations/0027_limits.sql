-- 0027: limits protect the owning services: permits for calls (concurrency and a token bucket),
-- taken in Postgres so they hold across every engine node, and waiters woken when capacity frees.
--
-- Why: nothing bounded how hard the engine called a service. 10,000 instances reached a handler
-- at whatever rate the workers allowed, and two captures for one account could run at once.
--
-- A limit is a named resource: `handler:<NAME>` (every env, scope '*') or the same name in one
-- env's scope, and `key:<logicId>:<step>` / `key:<logicId>:*` (per key, scope = the env) with the
-- evaluated key. A limit has an optional concurrency cap and an optional rate (per second, with a
-- burst). Configuration gives the defaults; `limit_overrides` (set through the API) replaces them.
--
-- acquire_permits() takes every permit an attempt needs, or none: a permit is a row tied to the
-- holder's lease and row version (a step) or to the instance not having ended (a workflow), so a
-- crashed holder's permit is dead once its lease expires and nothing leaks. An attempt without a
-- permit leaves a waiter row and lets its lease go with no wake-up time (`infinity`): it costs no
-- attempt and nobody polls it. A rate waiter is given a time in line (1/rate after the last one
-- given) and wakes then to take its token; tokens are only ever taken, never paid ahead, so the
-- calls let through in any second stay within burst + rate however late a waiter wakes. Whoever frees capacity wakes the first waiters
-- (wake_permit_waiters(): lease_expires_at = now(), so the next claim takes them), and a sweep
-- wakes what a crashed holder left waiting.

CREATE TABLE limit_overrides (
  env_id      text        NOT NULL,  -- the scope: an env, or '*' for every env
  resource    text        NOT NULL,
  concurrency integer     CHECK (concurrency >= 0),
  rate        float8      CHECK (rate > 0),
  burst       integer     CHECK (burst >= 1),
  updated_by  text        NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (env_id, resource)
);

-- one row per (scope, resource, key) ever limited: the token bucket, and the lock that orders
-- every acquire and wake-up of the resource
CREATE TABLE limit_buckets (
  env_id      text        NOT NULL,
  resource    text        NOT NULL,
  key         text        NOT NULL,
  tokens      float8      NOT NULL,
  refilled_at timestamptz NOT NULL,
  -- the last time given to a rate waiter: the next one in line comes 1/rate after it
  next_slot   timestamptz,
  PRIMARY KEY (env_id, resource, key)
);

CREATE TABLE permits (
  env_id       text        NOT NULL,
  resource     text        NOT NULL,
  key          text        NOT NULL,
  workflow_id  uuid        NOT NULL,
  -- a step's permit lives while its holder's lease does (this token, this row version, not
  -- expired); a workflow's (row_version NULL) while the instance has not ended
  lease_token  uuid,
  row_version  bigint,
  acquired_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, env_id, resource, key)
);
CREATE INDEX permits_resource ON permits (env_id, resource, key);

CREATE TABLE permit_waiters (
  id           bigserial   PRIMARY KEY,
  env_id       text        NOT NULL,
  resource     text        NOT NULL,
  key          text        NOT NULL,
  workflow_id  uuid        NOT NULL,
  -- 'concurrency': waits to be woken; 'rate': its turn for a token is at due_at
  kind         text        NOT NULL CHECK (kind IN ('concurrency', 'rate')),
  due_at       timestamptz,
  -- the configured cap when it queued (an override in force replaces it at wake-up)
  concurrency  integer,
  woken_at     timestamptz,
  since        timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workflow_id, env_id, resource, key)
);
CREATE INDEX permit_waiters_line ON permit_waiters (env_id, resource, key, id);

DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['limit_overrides', 'limit_buckets', 'permits', 'permit_waiters'] LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format($p$CREATE POLICY env_isolation ON %I TO flow_app
                     USING (env_id = current_setting('app.env_id', true))
                     WITH CHECK (env_id = current_setting('app.env_id', true))$p$, t);
    EXECUTE format('CREATE POLICY scheduler ON %I TO flow_engine USING (true) WITH CHECK (true)', t);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO flow_app, flow_engine', t);
  END LOOP;
  EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO flow_app, flow_engine', current_schema());
END
$$;

-- a limit changed through the API is an audit row naming the resource (and no instance or version)
ALTER TABLE audit ADD COLUMN resource text;
ALTER TABLE audit DROP CONSTRAINT audit_names_its_subject;
ALTER TABLE audit ADD CONSTRAINT audit_names_its_subject
  CHECK (workflow_id IS NOT NULL OR (logic_id IS NOT NULL AND version IS NOT NULL) OR resource IS NOT NULL);
CREATE INDEX audit_resource ON audit (resource, id) WHERE resource IS NOT NULL;

-- Whether a permit still holds: its step holder's lease is alive, or its workflow has not ended.
CREATE FUNCTION permit_alive(p permits, w workflows) RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT coalesce(CASE WHEN p.row_version IS NULL
    THEN w.state NOT IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered')
    ELSE w.lease_token = p.lease_token AND w.row_version = p.row_version AND w.lease_expires_at > now()
  END, false)
$$;

-- Wakes as many of a resource's first waiters as it has room for. Takes the bucket row's lock,
-- so a waiter never queues after the wake-up that should have seen it. A woken waiter counts
-- against the room for a lease's length (it is on its way); after that it is woken again.
CREATE FUNCTION wake_permit_waiters(s text, r text, k text) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  cap   integer;
  o     limit_overrides;
  live  integer;
  woken integer;
  n     integer;
BEGIN
  PERFORM 1 FROM limit_buckets b WHERE b.env_id = s AND b.resource = r AND b.key = k FOR UPDATE;
  -- waiters whose instance ended wait no more
  DELETE FROM permit_waiters q USING workflows w
  WHERE q.env_id = s AND q.resource = r AND q.key = k AND w.id = q.workflow_id
    AND w.state IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered');
  SELECT * INTO o FROM limit_overrides lo WHERE lo.env_id = s AND lo.resource = r;
  IF FOUND THEN cap := o.concurrency;
  ELSE SELECT max(q.concurrency) INTO cap FROM permit_waiters q WHERE q.env_id = s AND q.resource = r AND q.key = k;
  END IF;
  IF cap IS NULL THEN
    n := 1000000;  -- no cap (any more): every waiter goes
  ELSE
    SELECT count(*) INTO live FROM permits p JOIN workflows w ON w.id = p.workflow_id
    WHERE p.env_id = s AND p.resource = r AND p.key = k AND permit_alive(p, w);
    SELECT count(*) INTO woken FROM permit_waiters q
    WHERE q.env_id = s AND q.resource = r AND q.key = k AND q.kind = 'concurrency'
      AND q.woken_at > now() - interval '30 seconds';
    n := cap - live - woken;
  END IF;
  IF n <= 0 THEN RETURN 0; END IF;
  WITH first AS (
    SELECT q.id, q.workflow_id FROM permit_waiters q
    WHERE q.env_id = s AND q.resource = r AND q.key = k AND q.kind = 'concurrency'
      AND (q.woken_at IS NULL OR q.woken_at <= now() - interval '30 seconds')
    ORDER BY q.id LIMIT n
  ), marked AS (
    UPDATE permit_waiters q SET woken_at = now() FROM first WHERE q.id = first.id RETURNING q.workflow_id
  ), woke AS (
    -- only an instance nobody holds: a held one is running, and would lose its lease
    UPDATE workflows w SET lease_expires_at = now(), run_at = now()
    FROM marked WHERE w.id = marked.workflow_id AND w.lease_token IS NULL
    RETURNING w.id
  )
  SELECT count(*) INTO n FROM woke;
  IF n > 0 THEN PERFORM pg_notify('flow_work', ''); END IF;
  RETURN n;
END
$fn$;

-- Takes every permit in `needs` for the attempt the lease (tok, rv) holds, or none. `needs` is a
-- JSON array of {s: scope, r: resource, k: key, c: cap, rate, burst, w: workflow-wide}, the
-- configured or declared limits (an override in force replaces them). When all were taken, the
-- row's resource is NULL and `waiters` says whether anyone waits on them; else it names the
-- resource that has no room and, for a rate, the milliseconds until its turn in line. The instance then waits: its lease is let go, to be woken by a release
-- (cap) or when its token exists (rate).
CREATE FUNCTION acquire_permits(wf uuid, tok uuid, rv bigint, needs jsonb)
RETURNS TABLE (scope text, resource text, wait_ms float8, waiters boolean)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  prev_role text := current_setting('role');
  n      jsonb;
  s      text;
  r      text;
  k      text;
  cap    integer;
  rt     float8;
  bu     integer;
  o      limit_overrides;
  b      limit_buckets;
  mine   permit_waiters;
  live   integer;
  woken  integer;
  ahead  boolean;
  tokens float8;
  due    timestamptz;
  blocked_r text;
  blocked_s text;
  blocked_ms float8;
  granted jsonb := '[]';
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  -- in one order, so two acquirers never wait on each other's bucket rows in turn
  FOR n IN SELECT e.value FROM jsonb_array_elements(needs) e ORDER BY e.value->>'s', e.value->>'r', e.value->>'k' LOOP
    s := n->>'s'; r := n->>'r'; k := n->>'k';
    SELECT * INTO o FROM limit_overrides lo WHERE lo.env_id = s AND lo.resource = r;
    IF FOUND THEN cap := o.concurrency; rt := o.rate; bu := o.burst;
    ELSE cap := (n->>'c')::integer; rt := (n->>'rate')::float8; bu := (n->>'burst')::integer;
    END IF;
    CONTINUE WHEN cap IS NULL AND rt IS NULL;
    -- a workflow's permit, once taken, is held until it ends: its later attempts pass
    IF (n->>'w')::boolean AND EXISTS (SELECT 1 FROM permits p WHERE p.workflow_id = wf AND p.env_id = s AND p.resource = r AND p.key = k) THEN
      CONTINUE;
    END IF;
    SELECT * INTO b FROM limit_buckets lb WHERE lb.env_id = s AND lb.resource = r AND lb.key = k FOR UPDATE;
    IF NOT FOUND THEN
      INSERT INTO limit_buckets AS lb (env_id, resource, key, tokens, refilled_at)
      VALUES (s, r, k, coalesce(bu, 1), now()) ON CONFLICT DO NOTHING;
      SELECT * INTO b FROM limit_buckets lb WHERE lb.env_id = s AND lb.resource = r AND lb.key = k FOR UPDATE;
    END IF;
    SELECT * INTO mine FROM permit_waiters q WHERE q.workflow_id = wf AND q.env_id = s AND q.resource = r AND q.key = k;
    IF cap IS NOT NULL THEN
      SELECT count(*) INTO live FROM permits p JOIN workflows w ON w.id = p.workflow_id
      WHERE p.env_id = s AND p.resource = r AND p.key = k AND p.workflow_id <> wf AND permit_alive(p, w);
      SELECT count(*) INTO woken FROM permit_waiters q
      WHERE q.env_id = s AND q.resource = r AND q.key = k AND q.kind = 'concurrency' AND q.workflow_id <> wf
        AND q.woken_at > now() - interval '30 seconds';
      -- first come, first served: a newcomer queues behind anyone waiting to be woken
      ahead := EXISTS (SELECT 1 FROM permit_waiters q
                       WHERE q.env_id = s AND q.resource = r AND q.key = k AND q.kind = 'concurrency'
                         AND q.workflow_id <> wf AND q.woken_at IS NULL
                         AND (mine.id IS NULL OR mine.kind <> 'concurrency' OR q.id < mine.id));
      IF live + woken >= cap OR ahead THEN
        IF mine.id IS NULL OR mine.kind <> 'concurrency' THEN
          -- a rate waiter leaves the rate line for this one
          DELETE FROM permit_waiters q WHERE q.id = mine.id;
          INSERT INTO permit_waiters (env_id, resource, key, workflow_id, kind, concurrency)
          VALUES (s, r, k, wf, 'concurrency', (n->>'c')::integer);
        ELSE
          UPDATE permit_waiters q SET woken_at = NULL WHERE q.id = mine.id;
        END IF;
        -- tell the holders' engines: their releases must look for waiters from now on
        PERFORM pg_notify('flow_permit_waiting', s || E'\n' || r);
        blocked_s := s; blocked_r := r; blocked_ms := NULL;
        EXIT;
      END IF;
    END IF;
    IF rt IS NOT NULL THEN
      tokens := least(coalesce(bu, 1)::float8, b.tokens + rt * extract(epoch FROM clock_timestamp() - b.refilled_at));
      -- a newcomer joins the line behind those in it; one whose turn came takes a token if there
      -- is one (one in line before it but late loses no turn: it takes the next token)
      ahead := (mine.id IS NULL OR mine.kind <> 'rate')
               AND EXISTS (SELECT 1 FROM permit_waiters q
                           WHERE q.env_id = s AND q.resource = r AND q.key = k AND q.kind = 'rate' AND q.workflow_id <> wf);
      IF tokens < 1 OR ahead THEN
        IF mine.kind = 'rate' THEN
          -- in line already, and woken early or ahead of its turn: keep the place, look again soon
          due := clock_timestamp() + (CASE WHEN tokens >= 1 THEN 1 ELSE 1 - tokens END) / rt * interval '1 second';
          UPDATE permit_waiters q SET due_at = due WHERE q.id = mine.id;
        ELSE
          -- a time in line: 1/rate after the last one given, and not before a token can exist
          due := greatest(clock_timestamp() + greatest(1 - tokens, 0) / rt * interval '1 second',
                          coalesce(b.next_slot, '-infinity') + interval '1 second' / rt);
          UPDATE limit_buckets lb SET next_slot = due WHERE lb.env_id = s AND lb.resource = r AND lb.key = k;
          DELETE FROM permit_waiters q WHERE q.id = mine.id;
          INSERT INTO permit_waiters (env_id, resource, key, workflow_id, kind, due_at, concurrency)
          VALUES (s, r, k, wf, 'rate', due, (n->>'c')::integer);
        END IF;
        blocked_s := s; blocked_r := r; blocked_ms := 1000 * extract(epoch FROM due - clock_timestamp());
        EXIT;
      END IF;
      granted := granted || jsonb_build_object('s', s, 'r', r, 'k', k, 'cap', cap, 'tokens', tokens);
      CONTINUE;
    END IF;
    granted := granted || jsonb_build_object('s', s, 'r', r, 'k', k, 'cap', cap);
  END LOOP;

  IF blocked_r IS NULL THEN
    -- every permit granted: take them (a token from each bucket), and wait for nothing any more
    UPDATE limit_buckets lb SET tokens = (g->>'tokens')::float8 - 1, refilled_at = clock_timestamp()
    FROM jsonb_array_elements(granted) g
    WHERE g ? 'tokens' AND lb.env_id = g->>'s' AND lb.resource = g->>'r' AND lb.key = g->>'k';
    INSERT INTO permits AS p (env_id, resource, key, workflow_id, lease_token, row_version)
    SELECT g->>'s', g->>'r', g->>'k', wf, CASE WHEN (n2->>'w')::boolean THEN NULL ELSE tok END,
           CASE WHEN (n2->>'w')::boolean THEN NULL ELSE rv END
    FROM jsonb_array_elements(granted) g
    JOIN jsonb_array_elements(needs) n2 ON n2->>'s' = g->>'s' AND n2->>'r' = g->>'r' AND n2->>'k' = g->>'k'
    WHERE g->>'cap' IS NOT NULL
    ON CONFLICT (workflow_id, env_id, resource, key) DO UPDATE
      SET lease_token = excluded.lease_token, row_version = excluded.row_version, acquired_at = now();
    DELETE FROM permit_waiters q USING jsonb_array_elements(granted) g
    WHERE q.workflow_id = wf AND q.env_id = g->>'s' AND q.resource = g->>'r' AND q.key = g->>'k';
    -- whether anyone waits on what it took: if not, its holder need not look when it lets go
    RETURN QUERY SELECT NULL::text, NULL::text, NULL::float8, EXISTS (
      SELECT 1 FROM jsonb_array_elements(granted) g JOIN permit_waiters q
        ON q.env_id = g->>'s' AND q.resource = g->>'r' AND q.key = g->>'k' AND q.kind = 'concurrency'
      WHERE g->>'cap' IS NOT NULL);
  ELSE
    -- wait: let the lease go as its holder (a receipt, so no lease-taken notice), with the
    -- wake-up time of its turn for a token, or none until a release wakes it
    UPDATE workflows w
    SET lease_token = NULL,
        lease_expires_at = CASE WHEN blocked_ms IS NULL THEN 'infinity' ELSE clock_timestamp() + blocked_ms * interval '1 millisecond' END,
        run_at = CASE WHEN blocked_ms IS NULL THEN 'infinity' ELSE clock_timestamp() + blocked_ms * interval '1 millisecond' END,
        row_version = w.row_version + 1, commit_token = w.lease_token, commit_version = w.row_version + 1
    WHERE w.id = wf AND w.lease_token = tok AND w.row_version = rv;
    RETURN QUERY SELECT blocked_s, blocked_r, blocked_ms, true;
  END IF;
  PERFORM set_config('role', prev_role, true);
END
$fn$;

-- Wakes the first waiters of each resource an instance's permits held (its step's, and its
-- workflow's once `ended`). Called after the commit that ends the holder's attempt,
-- which has already made the step's permit dead (row_version moved on): this only wakes sooner.
CREATE FUNCTION release_permits(wf uuid, ended boolean) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  f record;
  n integer := 0;
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  -- the permits are dead already (row_version moved on, or the instance ended); deleting them
  -- is the sweep's work: this statement only looks for waiters, so it writes nothing and takes no
  -- lock when nobody waits (the uncontended path)
  FOR f IN
    SELECT DISTINCT p.env_id, p.resource, p.key FROM permits p
    WHERE p.workflow_id = wf AND (ended OR p.row_version IS NOT NULL)
      AND EXISTS (SELECT 1 FROM permit_waiters q WHERE q.env_id = p.env_id AND q.resource = p.resource AND q.key = p.key AND q.kind = 'concurrency')
  LOOP
    n := n + wake_permit_waiters(f.env_id, f.resource, f.key);
  END LOOP;
  PERFORM set_config('role', prev_role, true);
  RETURN n;
END
$fn$;

-- What a crashed holder, an operator's cancel or a changed limit left: dead permits are dropped
-- and every resource with waiters is offered its room again. Run by every engine now and then.
CREATE FUNCTION sweep_permits() RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  f record;
  n integer := 0;
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  DELETE FROM permits p USING workflows w WHERE w.id = p.workflow_id AND NOT permit_alive(p, w);
  DELETE FROM permits p WHERE NOT EXISTS (SELECT 1 FROM workflows w WHERE w.id = p.workflow_id);
  DELETE FROM permit_waiters q WHERE NOT EXISTS (SELECT 1 FROM workflows w WHERE w.id = q.workflow_id
    AND w.state NOT IN ('completed', 'failed', 'compensated', 'cancelled', 'dead_lettered'));
  FOR f IN SELECT DISTINCT q.env_id, q.resource, q.key FROM permit_waiters q WHERE q.kind = 'concurrency' LOOP
    n := n + wake_permit_waiters(f.env_id, f.resource, f.key);
  END LOOP;
  PERFORM set_config('role', prev_role, true);
  RETURN n;
END
$fn$;

-- A limit changed (an override set or removed): no waiter keeps the old one. Rate waiters leave
-- their line and are woken to queue again at the new rate; cap waiters are offered the new room
-- at once.
CREATE FUNCTION apply_limit_change(s text, r text) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  prev_role text := current_setting('role');
  f record;
  n integer := 0;
BEGIN
  PERFORM set_config('role', 'flow_engine', true);
  FOR f IN SELECT b.key FROM limit_buckets b WHERE b.env_id = s AND b.resource = r ORDER BY b.key FOR UPDATE LOOP
    WITH lined AS (
      DELETE FROM permit_waiters q WHERE q.env_id = s AND q.resource = r AND q.key = f.key AND q.kind = 'rate'
      RETURNING q.workflow_id
    ), restart AS (
      UPDATE limit_buckets b SET next_slot = NULL WHERE b.env_id = s AND b.resource = r AND b.key = f.key
    ), woke AS (
      UPDATE workflows w SET lease_expires_at = now(), run_at = now()
      FROM lined WHERE w.id = lined.workflow_id AND w.lease_token IS NULL
      RETURNING w.id
    )
    SELECT n + count(*) INTO n FROM woke;
    n := n + wake_permit_waiters(s, r, f.key);
  END LOOP;
  IF n > 0 THEN PERFORM pg_notify('flow_work', ''); END IF;
  PERFORM pg_notify('flow_limits', '');
  PERFORM set_config('role', prev_role, true);
  RETURN n;
END
$fn$;

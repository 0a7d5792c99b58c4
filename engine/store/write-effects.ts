import type { Transition } from '../core/transition.ts';

/**
 * The CTE fragments that write a transition's step_runs rows, outbox rows and timers, all joined
 * to `w` (the workflow row the statement just wrote). If `w` is empty — the write was fenced out —
 * none of them writes anything, so the whole transition is one atomic statement.
 *
 * Parameters: $A attempts to insert, $F attempts to finish, $O outbox rows, $T timers (jsonb arrays).
 */
export function effectsSql(p: { inserts: number; finishes: number; outbox: number; timers: number }): string {
  return `
  fin AS (
    UPDATE step_runs s SET state = f.state, output = f.output, error = f.error, finished_at = now()
    FROM w, jsonb_to_recordset($${p.finishes}::jsonb) AS f(seq int, state text, output jsonb, error jsonb)
    WHERE s.workflow_id = w.id AND s.seq = f.seq
  ),
  ins AS (
    INSERT INTO step_runs (env_id, workflow_id, seq, step, attempt, generation, kind, state, input, output, error,
                           idempotency_key, finished_at)
    SELECT w.env_id, w.id, r.seq, r.step, r.attempt, r.generation, r.kind, r.state, r.input, r.output, r.error,
           r."idempotencyKey", CASE WHEN r.state = 'running' THEN NULL ELSE now() END
    FROM w, jsonb_to_recordset($${p.inserts}::jsonb) AS r(seq int, step text, attempt int, generation int, kind text,
         state text, input jsonb, output jsonb, error jsonb, "idempotencyKey" text)
  ),
  ob AS (
    INSERT INTO outbox (env_id, workflow_id, kind, topic, payload, idempotency_key)
    SELECT w.env_id, w.id, o.kind, o.topic, o.payload, o."idempotencyKey"
    FROM w, jsonb_to_recordset($${p.outbox}::jsonb) AS o(kind text, topic text, payload jsonb, "idempotencyKey" text)
  ),
  tm AS (
    INSERT INTO timers (env_id, id, workflow_id, purpose, fire_at, payload)
    SELECT w.env_id, gen_random_uuid(), w.id, t.purpose,
           coalesce(t.at, now() + t."delayMs" * interval '1 millisecond'), jsonb_build_object('seq', t.seq)
    FROM w, jsonb_to_recordset($${p.timers}::jsonb) AS t(purpose text, "delayMs" float8, at timestamptz, seq int)
  )`;
}

/** The four jsonb parameters for `effectsSql`, in order: inserts, finishes, outbox, timers. */
export function effectsParams(t: Transition): string[] {
  const inserts = t.attempts.filter((a) => a.op === 'insert');
  const finishes = t.attempts.filter((a) => a.op === 'finish');
  const outbox = t.commands.filter((c) => c.type === 'outbox');
  const timers = t.commands.filter((c) => c.type === 'timer');
  return [inserts, finishes, outbox, timers].map((rows) => JSON.stringify(rows));
}

import { canonicalJson, sha256Hex } from '../../contracts/canonical-json.ts';
import type { LogicVersion } from '../../contracts/logic-version.ts';
import { memoByObject } from '../memo.ts';

/** The routes of a step, by field. */
export interface StepRoutes {
  next?: string;
  onError?: string;
  onTimeout?: string;
  otherwise?: string;
  branches?: { when: string; next: string }[];
}

/**
 * What the version gate remembers of a locked LogicVersion: enough to explain a later change
 * (routes, kinds, a digest of each step's configuration, the input schema) without keeping the
 * whole document.
 */
export interface LockShape {
  start: string;
  input: Record<string, unknown>;
  steps: Record<string, { kind: string; config: string; routes: StepRoutes }>;
  top: { domain: string; output?: string; modules?: string; triggers: string[]; schedules?: string[]; description?: string };
}

const ROUTE_FIELDS = ['next', 'onError', 'onTimeout', 'otherwise', 'branches'] as const;

export function digest(value: unknown): string {
  return sha256Hex(canonicalJson(value)).slice(0, 16);
}

export const shapeOf = memoByObject(computeShape);

function computeShape(doc: LogicVersion): LockShape {
  const steps: LockShape['steps'] = {};
  for (const [name, step] of Object.entries(doc.steps)) {
    const rest: Record<string, unknown> = { ...step };
    const routes: StepRoutes = {};
    for (const f of ROUTE_FIELDS) {
      const v = rest[f];
      delete rest[f];
      if (f === 'branches') {
        if (Array.isArray(v)) routes.branches = v.map((b: { when: string; next: string }) => ({ when: b.when, next: b.next }));
      } else if (typeof v === 'string') routes[f] = v;
    }
    steps[name] = { kind: step.kind, config: digest(rest), routes };
  }
  return {
    start: doc.start,
    input: doc.input,
    steps,
    top: {
      domain: doc.domain,
      ...(doc.output === undefined ? {} : { output: digest(doc.output) }),
      ...(doc.modules === undefined ? {} : { modules: digest(doc.modules) }),
      triggers: (doc.triggers ?? []).map((t) => `${t.event} ${digest('message' in t ? t : t.input)}`),
      ...(doc.schedules === undefined ? {} : { schedules: doc.schedules.map((s) => `${s.name ?? ''} ${digest(s)}`) }),
      ...(doc.description === undefined ? {} : { description: digest(doc.description) }),
    },
  };
}

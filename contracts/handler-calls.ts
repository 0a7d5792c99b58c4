/**
 * Every proxy-back call a LogicVersion can make, read off the document alone: each proxy step and
 * proxy compensation, and each host-function import of the modules its func steps and func
 * compensations run. One walk, used by the grant rule (what a publisher vouches for) and by the
 * handler usage report (what a handler's owners may turn off).
 */
import type { Action, LogicVersion, StepDef } from './logic-version.ts';

export interface HandlerCall {
  step: string;
  /** The step's own effect, its compensation, or its module's host function `<import>`. */
  part: 'step' | 'compensate' | `import:${string}`;
  /** The handler profile, as the step names it (the definition's domain when it names none). */
  handler: string;
  path: string;
  method: string;
}

export function handlerCalls(logic: LogicVersion): HandlerCall[] {
  const calls: HandlerCall[] = [];
  const effect = (step: string, part: 'step' | 'compensate', def: StepDef | Action) => {
    if (def.kind === 'proxy') calls.push({ step, part, handler: def.handler ?? logic.domain, path: def.path, method: def.method ?? 'POST' });
    if (def.kind === 'func') {
      for (const [name, target] of Object.entries(logic.modules?.[def.module]?.imports ?? {})) {
        calls.push({ step, part: `import:${name}`, handler: target.handler ?? logic.domain, path: target.path, method: target.method ?? 'POST' });
      }
    }
  };
  for (const [name, step] of Object.entries(logic.steps)) {
    effect(name, 'step', step);
    if (step.compensate !== undefined) effect(name, 'compensate', step.compensate);
  }
  return calls;
}

import type { Action, LogicVersion, StepDef } from './logic-version.ts';
import { routesOf } from './validate.ts';

/**
 * A Mermaid flowchart of one LogicVersion: steps (shaped by kind), routes, branch conditions, error
 * and timeout routes (dotted), and each step's compensation (dashed, to the side).
 */
export function mermaidDiagram(doc: LogicVersion): string {
  const order = stepOrder(doc);
  const id = new Map(order.map((name, i) => [name, `s${i}`]));
  const lines = ['flowchart TD', `  %% ${doc.logicId}@${doc.version} ${doc.hash}`, '  start(("start"))', '  done(("end"))'];
  for (const name of order) lines.push(`  ${node(id.get(name)!, name, doc.steps[name]!)}`);
  lines.push(`  start --> ${id.get(doc.start)}`);
  for (const [i, name] of order.entries()) {
    const step = doc.steps[name]!;
    const from = id.get(name)!;
    const to = (target: string) => id.get(target) ?? 'done';
    if (step.kind === 'choice') {
      for (const b of step.branches) lines.push(`  ${from} -->|"${escapeLabel(truncate(b.when))}"| ${to(b.next)}`);
      lines.push(`  ${from} -->|otherwise| ${to(step.otherwise)}`);
    } else if (step.kind !== 'fail') {
      lines.push(`  ${from} --> ${step.next ? to(step.next) : 'done'}`);
    }
    if (step.onError) lines.push(`  ${from} -.->|onError| ${to(step.onError)}`);
    if (step.kind === 'decision' && step.onTimeout) lines.push(`  ${from} -.->|onTimeout| ${to(step.onTimeout)}`);
    if (step.compensate) {
      lines.push(`  c${i}[/"${escapeLabel(`undo: ${action(step.compensate)}`)}"/]`);
      lines.push(`  ${from} -.-o|compensate| c${i}`);
      lines.push(`  class c${i} compensation`);
    }
  }
  lines.push('  classDef compensation stroke-dasharray: 4 4');
  return `${lines.join('\n')}\n`;
}

/** Breadth-first from `start` along routes, then any unreachable steps by name: stable for a document. */
export function stepOrder(doc: LogicVersion): string[] {
  const seen = new Set<string>();
  const queue = [doc.start];
  while (queue.length > 0) {
    const name = queue.shift()!;
    const step = doc.steps[name];
    if (seen.has(name) || step === undefined) continue;
    seen.add(name);
    for (const r of routesOf(step)) queue.push(r.target);
  }
  return [...seen, ...Object.keys(doc.steps).filter((n) => !seen.has(n)).sort()];
}

function node(id: string, name: string, step: StepDef): string {
  const label = escapeLabel(`${name}<br/>${describe(step)}`);
  switch (step.kind) {
    case 'choice':
      return `${id}{"${label}"}`;
    case 'decision':
    case 'waitFor':
      return `${id}{{"${label}"}}`;
    case 'delay':
      return `${id}(["${label}"])`;
    case 'children':
      return `${id}[["${label}"]]`;
    case 'fail':
      return `${id}[\\"${label}"/]`;
    default:
      return `${id}["${label}"]`;
  }
}

function describe(step: StepDef): string {
  switch (step.kind) {
    case 'proxy':
    case 'http':
    case 'func':
      return action(step as Action);
    case 'decision':
      return `decision: ${step.options.join(' / ')}${step.deadline ? ` (deadline ${step.deadline})` : ''}`;
    case 'waitFor':
      return `waitFor message ${step.message}${step.timeout ? ` (timeout ${step.timeout})` : ''}`;
    case 'delay':
      return `delay ${step.duration ?? 'until timestamp'}`;
    case 'children':
      return `children: ${step.logicId}${step.version ? `@${step.version}` : ''} (${step.failurePolicy})`;
    case 'emit':
      return `emit ${step.event}`;
    case 'fail':
      return `fail ${step.code}`;
    default:
      return step.kind;
  }
}

function action(a: Action): string {
  if (a.kind === 'proxy') return `proxy ${a.method ?? 'POST'} ${a.handler ? `${a.handler}:` : ''}${a.path}`;
  if (a.kind === 'http') return `http ${a.method} ${/^https?:\/\//.test(a.url) ? a.url : '(computed url)'}`;
  return `func ${a.module}.${a.export ?? 'run'}`;
}

function truncate(text: string): string {
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

/** Mermaid labels are quoted; quotes and angle brackets (other than <br/>) become entities. */
function escapeLabel(text: string): string {
  return text
    .replace(/"/g, '#quot;')
    .replace(/<(?!br\/>)/g, '#lt;')
    .replace(/(?<!<br\/)>/g, '#gt;');
}

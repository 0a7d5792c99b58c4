import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  canonicalJson,
  LogicVersionInvalid,
  logicVersionHash,
  parseLogicVersion,
  verifyLogicVersionHash,
} from '../../contracts/index.ts';
import { makeLogic } from './helpers.ts';

function issuesOf(doc: unknown): { code: string; path: string }[] {
  try {
    parseLogicVersion(doc);
    return [];
  } catch (err) {
    expect(err).toBeInstanceOf(LogicVersionInvalid);
    return (err as LogicVersionInvalid).issues.map(({ code, path }) => ({ code, path }));
  }
}

const chain = makeLogic({
  start: 'a',
  steps: {
    a: { kind: 'proxy', path: '/reserve', input: '{ "cents": input.amount * 100 }', next: 'b' },
    b: { kind: 'pass', input: 'steps.a' },
  },
});

describe('LogicVersion validation', () => {
  it('accepts a well-formed document and keeps it unchanged', () => {
    expect(parseLogicVersion(structuredClone(chain))).toEqual(chain);
  });

  it('names the JSON path of a schema problem', () => {
    const doc = { ...chain, steps: { ...chain.steps, a: { kind: 'proxy', path: 'no-slash' } } };
    expect(issuesOf(doc)).toContainEqual({ code: 'FLOW_LV_SCHEMA', path: 'steps.a.path' });
  });

  it('refuses an unknown step kind', () => {
    const doc = { ...chain, steps: { ...chain.steps, b: { kind: 'teleport' } } };
    expect(issuesOf(doc).map((i) => i.path)).toContain('steps.b.kind');
  });

  it('refuses routes to steps that do not exist', () => {
    const doc = makeLogic({ start: 'a', steps: { a: { kind: 'pass', next: 'nope', onError: 'gone' } } });
    expect(issuesOf(doc)).toEqual([
      { code: 'FLOW_LV_UNKNOWN_STEP', path: 'steps.a.next' },
      { code: 'FLOW_LV_UNKNOWN_STEP', path: 'steps.a.onError' },
    ]);
  });

  it('refuses a missing start step', () => {
    const doc = makeLogic({ start: 'x', steps: { a: { kind: 'pass' } } });
    expect(issuesOf(doc)).toContainEqual({ code: 'FLOW_LV_UNKNOWN_STEP', path: 'start' });
  });

  it('refuses steps unreachable from start', () => {
    const doc = makeLogic({ start: 'a', steps: { a: { kind: 'pass' }, orphan: { kind: 'pass' } } });
    expect(issuesOf(doc)).toEqual([{ code: 'FLOW_LV_UNREACHABLE_STEP', path: 'steps.orphan' }]);
  });

  it('treats choice branches, otherwise and onTimeout as routes', () => {
    const doc = makeLogic({
      start: 'c',
      steps: {
        c: { kind: 'choice', branches: [{ when: 'input.x > 1', next: 'd' }], otherwise: 'e' },
        d: { kind: 'decision', options: ['ok'], deadline: 'P1D', onTimeout: 'e' },
        e: { kind: 'pass' },
      },
    });
    expect(issuesOf(doc)).toEqual([]);
  });

  it('refuses a func step whose module is not declared', () => {
    const doc = makeLogic({ start: 'f', steps: { f: { kind: 'func', module: 'risk' } } });
    expect(issuesOf(doc)).toEqual([{ code: 'FLOW_LV_UNKNOWN_MODULE', path: 'steps.f.module' }]);
  });

  it('refuses expressions that do not parse', () => {
    const doc = makeLogic({ start: 'a', steps: { a: { kind: 'pass', input: '{ "a": ' } } });
    expect(issuesOf(doc)).toEqual([{ code: 'FLOW_LV_EXPR_SYNTAX', path: 'steps.a.input' }]);
  });

  it.each(['$now()', '$millis()', '{ "r": $random() }', '$map([1], function($x) { $now() })'])(
    'refuses the replay-breaking expression %s',
    (expr) => {
      const doc = makeLogic({ start: 'a', steps: { a: { kind: 'pass', input: expr } } });
      expect(issuesOf(doc)).toEqual([{ code: 'FLOW_LV_EXPR_FORBIDDEN', path: 'steps.a.input' }]);
    },
  );

  it('refuses a document whose hash does not match its content', () => {
    const doc = { ...chain, description: 'edited after compiling' };
    expect(issuesOf(doc)).toEqual([{ code: 'FLOW_LV_HASH_MISMATCH', path: 'hash' }]);
  });

  it('requires exactly one of duration or until on a delay', () => {
    const doc = makeLogic({ start: 'd', steps: { d: { kind: 'delay' } } });
    expect(issuesOf(doc).map((i) => i.code)).toEqual(['FLOW_LV_SCHEMA']);
  });
});

describe('content hash', () => {
  it('ignores source, so a new compiler version keeps the hash', () => {
    const withSource = { ...chain, source: { file: 'x.ts', compiler: '9.9.9' } };
    expect(logicVersionHash(withSource)).toBe(chain.hash);
    expect(verifyLogicVersionHash(withSource)).toBe(true);
  });

  it('canonical JSON follows RFC 8785 for numbers, escapes and key order', () => {
    expect(canonicalJson({ b: 1e21, a: [1.5, 'é\n', null], '\u20ac': -0, '1': true })).toBe(
      '{"1":true,"a":[1.5,"é\\n",null],"b":1e+21,"€":0}',
    );
  });

  it('the hash is stable under any reordering of object keys', () => {
    const shuffle = (v: unknown, rnd: () => number): unknown => {
      if (Array.isArray(v)) return v.map((x) => shuffle(x, rnd));
      if (v !== null && typeof v === 'object') {
        const entries = Object.entries(v).sort(() => rnd() - 0.5);
        return Object.fromEntries(entries.map(([k, x]) => [k, shuffle(x, rnd)]));
      }
      return v;
    };
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer(), (value, seed) => {
        let s = seed;
        const rnd = () => {
          s = (s * 1103515245 + 12345) % 2 ** 31;
          return s / 2 ** 31;
        };
        const doc = { ...chain, description: 'x', extra: value };
        expect(logicVersionHash(shuffle(doc, rnd) as Record<string, unknown>)).toBe(logicVersionHash(doc));
      }),
    );
  });
});

import { describe, expect, it } from 'vitest';
import { copyJson } from '../../engine/core/copy-json.ts';

// Draft copies every instance with copyJson instead of structuredClone (engine/core/copy-json.ts):
// the copy must be as deep and as faithful for JSON data, a user's odd keys included.
describe('copyJson', () => {
  it('copies JSON data deeply: equal, and sharing no object with the original', () => {
    const v = { a: [1, { b: 'x', c: [null, true, 2.5] }], d: { e: { f: [] as unknown[] } }, g: undefined };
    const c = copyJson(v);
    expect(c).toStrictEqual(v);
    expect(Object.hasOwn(c, 'g')).toBe(true);
    c.d.e.f.push(1);
    (c.a[1] as { b: string }).b = 'y';
    expect(v.d.e.f).toEqual([]);
    expect((v.a[1] as { b: string }).b).toBe('x');
  });

  it('keeps a "__proto__" key from JSON as data, not as the prototype', () => {
    const v = JSON.parse('{"__proto__": {"polluted": true}, "x": 1}') as Record<string, unknown>;
    const c = copyJson(v);
    expect(Object.getPrototypeOf(c)).toBe(Object.prototype);
    expect((c as { polluted?: boolean }).polluted).toBeUndefined();
    expect(Object.keys(c)).toEqual(['__proto__', 'x']);
    expect(JSON.stringify(c)).toBe(JSON.stringify(v));
  });
});

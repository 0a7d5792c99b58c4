import { afterAll, describe, expect, test } from 'vitest';
import { compile } from '../../compiler/index.ts';
import { CompileErrorCode } from '../../compiler/errors.ts';
import { diagnosticsOf, flowSource, scratchProject } from './project-helpers.ts';

const TYPED_LINE = "  .proxy('a', { path: '/a', input: ({ input }) => input.m });";
const CLOSURE_LINE = "  .proxy('a', { path: '/a', input: ({ input }) => input.n * RATE });";
const project = scratchProject({
  'package.json': JSON.stringify({ name: 'scratch', sentin8Flow: { roots: ['flows'] } }),
  'flows/typed.ts': flowSource(
    `export const typed = workflow({ logicId: 't.typed', version: 1, domain: 't', input: z.object({ n: z.number() }) })\n${TYPED_LINE}`,
  ),
  'flows/closure.ts': flowSource(
    'const RATE = 3;\n' +
      `export const closure = workflow({ logicId: 't.closure', version: 1, domain: 't', input: z.object({ n: z.number() }) })\n${CLOSURE_LINE}`,
  ),
  'lib/mapping.ts': 'export const double = ({ input }: { input: { n: number } }) => input.n * 2;\n',
  'flows/imported.ts': flowSource(
    "import { double } from '../lib/mapping.ts';\n" +
      "export const imported = workflow({ logicId: 't.imported', version: 1, domain: 't', input: z.object({ n: z.number() }) })\n" +
      "  .proxy('a', { path: '/a', input: double });",
  ),
  'flows/sdk-error.ts': flowSource(
    "export const sdkError = workflow({ logicId: 't.sdk', version: 1, domain: 't', input: z.object({}) })\n" +
      "  .proxy('a', { path: '/a' })\n  .fail('f', { code: 'X' });",
  ),
  'flows/bad-schedule.ts': flowSource(
    "export const badSchedule = workflow({ logicId: 't.sched', version: 1, domain: 't', input: z.object({}) })\n" +
      "  .schedule('0 6 1 * *', { timezone: 'Europe/Berln' })\n  .pass('p');",
  ),
  'flows/dup-a.ts': flowSource("export const a = workflow({ logicId: 't.dup', version: 1, domain: 't', input: z.object({}) }).pass('p');"),
  'flows/dup-b.ts': flowSource("export const b = workflow({ logicId: 't.dup', version: 1, domain: 't', input: z.object({}) }).pass('q');"),
});
afterAll(() => project.dispose());

describe('compile errors name the file, line and column', async () => {
  const diagnostics = await diagnosticsOf(compile({ root: project.dir, write: false }));
  const byFile = (file: string) => diagnostics.filter((d) => d.file === file);

  test('a TypeScript error in a definition fails the compile at its position', () => {
    expect(byFile('flows/typed.ts')).toEqual([
      expect.objectContaining({ code: CompileErrorCode.typeError, line: 5, column: TYPED_LINE.indexOf('input.m') + 7, message: expect.stringMatching(/TS2339.*'m'/) }),
    ]);
  });

  test('an unsupported construct in a mapping fails at its exact position', () => {
    expect(byFile('flows/closure.ts')).toEqual([expect.objectContaining({ code: CompileErrorCode.exprClosure, line: 6, column: CLOSURE_LINE.indexOf('RATE') + 1 })]);
  });

  test('a mapping imported from outside the roots is refused', () => {
    expect(byFile('flows/imported.ts')).toEqual([expect.objectContaining({ code: CompileErrorCode.exprNotInline })]);
  });

  test('a definition the SDK refuses is reported with the SDK code', () => {
    expect(byFile('flows/sdk-error.ts')).toEqual([
      expect.objectContaining({ code: CompileErrorCode.definition, message: expect.stringContaining('SDK_FALLTHROUGH_INTO_FAIL') }),
    ]);
  });

  test('a schedule croner cannot read is a compile error naming the workflow and the zone', () => {
    expect(byFile('flows/bad-schedule.ts')).toEqual([
      expect.objectContaining({
        code: CompileErrorCode.definition,
        message: expect.stringMatching(/t\.sched@1 schedule "0 6 1 \* \*": timezone "Europe\/Berln" is not an IANA time zone.*\[SDK_INVALID_OPTION\]/),
      }),
    ]);
  });

  test('the same logicId@version defined twice is refused', () => {
    expect(diagnostics.filter((d) => d.code === CompileErrorCode.duplicateVersion)).toHaveLength(1);
  });
});

test('a directory without definitions fails with COMPILE_NO_WORKFLOWS', async () => {
  const empty = scratchProject({ 'x.ts': 'export const x = 1;\n' });
  try {
    const diagnostics = await diagnosticsOf(compile({ root: empty.dir, write: false }));
    expect(diagnostics.map((d) => d.code)).toEqual([CompileErrorCode.noWorkflows]);
  } finally {
    empty.dispose();
  }
});

describe('a definition that needs ambient types', () => {
  // The lean check leaves @types/* out; `process` then has no type, and the compiler must fall
  // back to the author's own options rather than report an error tsc would not.
  const ambient = scratchProject({
    'flow.ts': flowSource(
      "const domain = process.env['FLOW_DOMAIN'] ?? 't';\n" +
        "export const ambient = workflow({ logicId: 't.ambient', version: 1, domain, input: z.object({ n: z.number() }) })\n" +
        "  .proxy('a', { path: '/a', input: ({ input }) => ({ twice: input.n * 2 }) });",
    ),
  });
  afterAll(() => ambient.dispose());

  test('compiles under the author options, with its mappings translated', async () => {
    const result = await compile({ root: ambient.dir, write: false });
    expect(result.versions.map((v) => v.doc.logicId)).toEqual(['t.ambient']);
    expect(result.versions[0]!.doc.steps['a']).toMatchObject({ input: '{"twice": input.n * 2}' });
  });
});

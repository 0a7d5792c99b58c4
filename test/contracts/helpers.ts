import { LOGIC_VERSION_SCHEMA, type LogicVersion, logicVersionHash } from '../../contracts/index.ts';

/** Builds a LogicVersion document with a correct hash from the parts a test cares about. */
export function makeLogic(parts: Partial<LogicVersion> & Pick<LogicVersion, 'steps' | 'start'>): LogicVersion {
  const doc = {
    schema: LOGIC_VERSION_SCHEMA,
    logicId: 'test.flow',
    version: 1,
    domain: 'test',
    input: { type: 'object' },
    ...parts,
    hash: '',
  } as LogicVersion;
  doc.hash = logicVersionHash(doc as unknown as Record<string, unknown>);
  return doc;
}

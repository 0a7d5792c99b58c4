import { expect, it } from 'vitest';
import { Engine } from '../../engine/runtime/engine.ts';
import { describeEachDriver } from '../support/db.ts';
import { uniqueLogic } from '../support/engine.ts';

/** Who published a version, who retired or reactivated it and why: audit rows as for every verb on an instance. */
describeEachDriver('version audit', (getDb) => {
  it('publish, retire and reactivate each write an audit row with actor, reason, before and after; an unchanged publish writes none', async () => {
    const engine = new Engine({ db: getDb(), env: 'audit-env' });
    try {
      const doc = uniqueLogic({ start: 'p', steps: { p: { kind: 'pass' } } });
      await engine.publishVersion('audit-env', doc, {}, { subject: 'ci@example.com', scopes: ['flow:publish'] });
      await engine.publishVersion('audit-env', doc, {}, { subject: 'ci@example.com', scopes: ['flow:publish'] });
      await engine.setVersionActive('audit-env', doc.logicId, doc.version, false, { actor: 'ops@example.com', reason: 'bad rates' });
      await engine.setVersionActive('audit-env', doc.logicId, doc.version, true, { actor: 'ops@example.com', reason: 'rates fixed' });
      const rows = await engine.versionAudit('audit-env', doc.logicId, doc.version);
      expect(rows.map(({ at: _, ...r }) => r)).toEqual([
        { verb: 'publish', actor: 'ci@example.com', reason: null, args: { hash: doc.hash }, before: null, after: { active: true, hash: doc.hash } },
        { verb: 'retire', actor: 'ops@example.com', reason: 'bad rates', args: {}, before: { active: true }, after: { active: false } },
        { verb: 'reactivate', actor: 'ops@example.com', reason: 'rates fixed', args: {}, before: { active: false }, after: { active: true } },
      ]);
      // another env sees none of them
      await expect(engine.versionAudit('audit-other', doc.logicId, doc.version)).resolves.toEqual([]);
    } finally {
      await engine.close();
    }
  });
});

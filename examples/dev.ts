/**
 * `npm run dev`: `s8flow dev` over the examples, with the demo's owning service as the handler of
 * every example domain (PAYMENTS, PROVISIONING, STATEMENTS), so all three run for real, and one
 * instance of each started once the first build is published. State lives in `.flow/`.
 */
import { runDev } from '../cli/commands/dev.ts';
import { DEMO_HANDLERS, startDemoService } from './demo-service.ts';
import { seedExamples } from './seed.ts';

const service = await startDemoService();
for (const name of DEMO_HANDLERS) process.env[`FLOW_HANDLER_${name}_URL`] = service.url;
const root = new URL('.', import.meta.url).pathname;
process.exitCode = await runDev([root, ...process.argv.slice(2)], {
  afterFirstBuild: async (dev) => {
    try {
      const ids = await seedExamples({ url: dev.url, token: dev.token, env: dev.engine.env });
      process.stdout.write(`  started one instance per example domain: ${ids.join(' ')}\n\n`);
    } catch (err) {
      // a broken first build publishes nothing: say so, and keep serving
      process.stdout.write(`  could not start the examples: ${(err as Error).message}\n\n`);
    }
  },
});
await service.close();

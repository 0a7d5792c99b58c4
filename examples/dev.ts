/**
 * `npm run dev`: `s8flow dev` over the examples, with the demo's owning service as the handler of
 * every example domain (PAYMENTS, PROVISIONING, STATEMENTS), so all three run for real. State
 * lives in `.flow/`.
 */
import { main } from '../cli/main.ts';
import { DEMO_HANDLERS, startDemoService } from './demo-service.ts';

const service = await startDemoService();
for (const name of DEMO_HANDLERS) process.env[`FLOW_HANDLER_${name}_URL`] = service.url;
const root = new URL('.', import.meta.url).pathname;
process.exitCode = await main(['dev', root, ...process.argv.slice(2)]);
await service.close();

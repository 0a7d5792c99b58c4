/**
 * `npm run dev`: `s8flow dev` over the examples, with the demo's owning service as the PAYMENTS handler,
 * so the example workflows run for real. State lives in `.flow/`.
 */
import { main } from '../cli/main.ts';
import { startDemoService } from './demo-service.ts';

const service = await startDemoService();
process.env['FLOW_HANDLER_PAYMENTS_URL'] = service.url;
const root = new URL('.', import.meta.url).pathname;
process.exitCode = await main(['dev', root, ...process.argv.slice(2)]);
await service.close();

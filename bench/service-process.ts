/**
 * The minimal owning service in a process of its own, for benches that profile or count the CPU
 * of the engine's process and must not count the service's. Prints its URL on the first line.
 */
import { minimalService } from './support.ts';

const service = await minimalService();
process.stdout.write(`${service.url}\n`);
process.on('SIGTERM', () => void service.close().then(() => process.exit(0)));

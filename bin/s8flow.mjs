#!/usr/bin/env node
// The s8flow command. The CLI is TypeScript; tsx loads it without a build step.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../cli/main.ts');
process.exitCode = await main(process.argv.slice(2));

import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', '{contracts,sdk,compiler,host-functions,engine,cli}/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Postgres-backed files each get their own schema, so they may run side by side.
    fileParallelism: true,
    maxWorkers: 2,
  },
});

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
    // Type tests (expectTypeOf, expect-error directives) assert nothing at run time: tsc checks
    // them. A file named *-types.test.ts runs under tsc as well as normally; a wrong inferred type,
    // or an expect-error directive that no longer meets an error, fails the suite.
    typecheck: {
      enabled: true,
      include: ['test/**/*-types.test.ts'],
      tsconfig: 'tsconfig.json',
    },
  },
});

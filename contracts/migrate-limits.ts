/**
 * The migrate verb's bounds (contracts/api/migrations.ts), zod-free so that the console can page
 * a dry run with them without carrying zod.
 */

/** The most instances one migration selects. */
export const MAX_MIGRATE = 10_000;
/** The most instances one page of a dry run lists. */
export const MAX_MIGRATE_PAGE = 1_000;

import { z } from 'zod';
import { Reason } from './common.ts';

/** A legal hold, its release, or an erasure: why (audited). */
export const HistoryVerbRequest = z.strictObject({ reason: Reason }).meta({ id: 'HistoryVerbRequest' });
export type HistoryVerbRequest = z.infer<typeof HistoryVerbRequest>;

export const RetentionRunRequest = z
  .strictObject({
    /** Change nothing; answer what a run would remove and free. (Default: false) */
    dryRun: z.boolean().optional(),
  })
  .meta({ id: 'RetentionRunRequest' });

/** What a retention run removed, dropped and freed (or, dry, would). */
export const RetentionReport = z
  .strictObject({
    dryRun: z.boolean(),
    instancesRemoved: z.int().min(0),
    /** Whole week partitions dropped, `journal_pYYYYMMDD` and `step_runs_pYYYYMMDD`. */
    partitionsDropped: z.array(z.string()),
    /** pg_total_relation_size of the history tables before and after. */
    bytesBefore: z.number().min(0),
    bytesAfter: z.number().min(0),
    bytesFreed: z.number(),
    /** Archive files written (FLOW_ARCHIVE_DIR), one per week of history. */
    archiveFiles: z.array(z.string()),
  })
  .meta({ id: 'RetentionReport' });
export type RetentionReportBody = z.infer<typeof RetentionReport>;

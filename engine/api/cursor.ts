import { z } from 'zod';
import { isStorableInstant } from '../../contracts/api/storable.ts';
import type { PagePosition } from '../store/list-workflows.ts';
import { CursorInvalid } from './errors.ts';

/**
 * Cursors are opaque to callers: base64url of the last row's position. They carry no secret —
 * the env comes from the path and row-level security, so a cursor cannot reach another env.
 */
const Position = z.strictObject({
  // a position this API wrote: microseconds, UTC, and a date Postgres can compare against
  createdAt: z.string().regex(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/).refine(isStorableInstant),
  id: z.uuid(),
});

export function encodeCursor(p: PagePosition): string {
  return Buffer.from(JSON.stringify({ createdAt: p.createdAt, id: p.id })).toString('base64url');
}

export function decodeCursor(cursor: string): PagePosition {
  try {
    return Position.parse(JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')));
  } catch {
    throw new CursorInvalid();
  }
}

import type { Client } from './tx.ts';

/**
 * Stores a workflow's new input (a repair at the start step). commit_transition() writes the state,
 * not the input — the input is otherwise fixed at start — so without this the next step, read
 * from the store, would still see the old input.
 */
export async function replaceInput(c: Client, id: string, input: unknown): Promise<void> {
  await c.query('UPDATE workflows SET input = $2 WHERE id = $1', [id, JSON.stringify(input)]);
}

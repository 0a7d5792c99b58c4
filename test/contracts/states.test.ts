import { describe, expect, it } from 'vitest';
import {
  isAllowedTransition,
  TERMINAL_STATES,
  TRANSITION_CAUSES,
  TRANSITIONS,
  WORKFLOW_STATES,
} from '../../contracts/index.ts';

describe('transition table', () => {
  it('names each transition once and only between known states and causes', () => {
    const keys = TRANSITIONS.map((t) => `${t.from}|${t.cause}|${t.to}`);
    expect(new Set(keys).size).toBe(keys.length);
    for (const t of TRANSITIONS) {
      expect(WORKFLOW_STATES).toContain(t.from);
      expect(WORKFLOW_STATES).toContain(t.to);
      expect(TRANSITION_CAUSES).toContain(t.cause);
    }
  });

  it('lets only operator verbs move an instance out of a terminal state', () => {
    for (const t of TRANSITIONS.filter((x) => TERMINAL_STATES.has(x.from))) expect(t.cause).toMatch(/^verb\./);
  });

  it('gives every state a way in and every non-terminal state a way out', () => {
    for (const s of WORKFLOW_STATES) {
      if (s !== 'pending') expect(TRANSITIONS.some((t) => t.to === s && t.from !== s)).toBe(true);
      if (!TERMINAL_STATES.has(s)) expect(TRANSITIONS.some((t) => t.from === s && t.to !== s)).toBe(true);
    }
  });

  it('every cause is used by at least one transition', () => {
    for (const c of TRANSITION_CAUSES) expect(TRANSITIONS.some((t) => t.cause === c)).toBe(true);
  });

  it('allows exactly the rows of the table', () => {
    let allowed = 0;
    for (const from of WORKFLOW_STATES)
      for (const cause of TRANSITION_CAUSES)
        for (const to of WORKFLOW_STATES) {
          const inTable = TRANSITIONS.some((t) => t.from === from && t.cause === cause && t.to === to);
          expect(isAllowedTransition(from, cause, to)).toBe(inTable);
          if (inTable) allowed++;
        }
    expect(allowed).toBe(TRANSITIONS.length);
  });
});

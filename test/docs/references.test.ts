import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from '../compiler/project-helpers.ts';

/**
 * Docs are reference, not a diary, and they point at files that exist. Two checks over what git
 * tracks (or would track): no "issue N" / "session N" outside the logs (which are history on purpose), and every
 * repository path a doc names in backticks resolves to a tracked file or folder.
 */

const tracked = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: REPO, encoding: 'utf8' }).split('\0')
  // node_modules is a symlink in a worktree, untracked; nothing under it is the repository's
  .filter((f) => f !== '' && f !== 'node_modules');

/** History on purpose: the logs, RELIABILITY.md's record of runs, and released migrations (never edited once released). */
const HISTORY = [/-log\.md$/, /^RELIABILITY\.md$/, /^engine\/store\/migrations\//];
const TEXT = /\.(ts|tsx|mts|mjs|cjs|js|md|sql|json|sh|css|html|yml|yaml)$/;
const DIARY = new RegExp(['issue', 'session'].map((w) => `\\b${w}\\s+#?[0-9]+`).join('|'), 'i');

/** Top-level folders and files, for telling a repository path from any other word with a slash. */
const TOP = new Set(tracked.map((f) => f.split('/')[0]!));

/** Names that stand for the reader's own folder (`dir/package.json`). */
const PLACEHOLDERS = new Set(['dir', 'node_modules']);

/** `path/like.this` tokens in backticks: a known top-level folder, or a file name with an extension, and nothing that is a glob, a placeholder or a URL. */
function pathsIn(markdown: string): string[] {
  const out: string[] = [];
  for (const [, token = ''] of markdown.matchAll(/`([^`\s]+)`/g)) {
    if (!token.includes('/') || /[*…<>{}$:?=]|\.\.\.|^[@~]|^\/|^--/.test(token)) continue;
    const first = token.split('/')[0]!;
    if (PLACEHOLDERS.has(first)) continue;
    const fileLike = /\.[a-z]{1,5}$/.test(token);
    if (TOP.has(first) || first === 'notes' || (fileLike && /^[\w.-]+(\/[\w.-]+)+$/.test(token))) out.push(token.replace(/\/$/, ''));
  }
  return out;
}

/** Resolved from the repository root, from the doc's folder, or as the tail of a tracked path (`routes/` inside a section on engine/api). */
function exists(path: string, doc: string): boolean {
  const candidates = [normalize(path), normalize(join(dirname(doc), path))];
  return tracked.some((f) => candidates.some((c) => f === c || f.startsWith(`${c}/`)) || f.endsWith(`/${path}`) || f.includes(`/${path}/`));
}

describe('docs are reference', () => {
  it('no "issue N" or "session N" outside the logs', () => {
    const found = tracked
      .filter((f) => TEXT.test(f) && !HISTORY.some((h) => h.test(f)))
      .flatMap((f) =>
        readFileSync(join(REPO, f), 'utf8')
          .split('\n')
          .flatMap((line, i) => (DIARY.test(line) ? [`${f}:${i + 1}: ${line.trim().slice(0, 100)}`] : [])),
      );
    expect(found).toEqual([]);
  });

  it('every repository path a doc names in backticks exists', () => {
    const docs = tracked.filter((f) => f.endsWith('.md') && !HISTORY.some((h) => h.test(f)));
    const dangling = docs.flatMap((doc) => pathsIn(readFileSync(join(REPO, doc), 'utf8')).flatMap((p) => (exists(p, doc) ? [] : [`${doc}: \`${p}\``])));
    expect(dangling).toEqual([]);
  });
});

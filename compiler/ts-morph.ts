import type * as TsMorph from 'ts-morph';
import { createRequire } from 'node:module';
import { withCodeCache } from './code-cache.ts';

/**
 * The ts-morph values the compiler uses, loaded with `require`. An ESM `import` of ts-morph makes
 * Node scan its 13 MB of CommonJS (typescript.js included) for export names and, under tsx, route
 * every nested require through the loader hooks: about 0.4 s of a 1.5 s cold compile. Import
 * values from here and types with `import type … from 'ts-morph'`. V8's code cache (code-cache.ts)
 * spares the compile of its JavaScript.
 */
const tsMorph = withCodeCache(() => createRequire(import.meta.url)('ts-morph')) as typeof TsMorph;

export const { Node, Project, SyntaxKind, ts } = tsMorph;
export type Node<T extends TsMorph.ts.Node = TsMorph.ts.Node> = TsMorph.Node<T>;
export type Project = TsMorph.Project;
export type SyntaxKind = TsMorph.SyntaxKind;

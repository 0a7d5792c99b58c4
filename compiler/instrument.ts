import type { SourceFile } from 'ts-morph';
import { Node } from './ts-morph.ts';

/** The property the instrumented bundle sets on each mapping function: `<file index>#<node index>`. */
export const LOC_KEY = 'sentin8.flow.loc';

/** A definition file's source with every outermost function tagged, and the tagged nodes by id. */
export interface Instrumented {
  readonly text: string;
  readonly nodes: readonly Node[];
}

/**
 * Wraps every outermost arrow function and function expression as `__s8loc(fn, "<id>")`, so a
 * mapping the builder receives at run time leads back to its syntax node for translation.
 * Functions nested in other functions (`.map` callbacks) are translated as part of their parent.
 */
export function instrument(sf: SourceFile, fileId: number): Instrumented {
  const nodes: Node[] = [];
  sf.forEachDescendant((node, traversal) => {
    if (Node.isArrowFunction(node) || Node.isFunctionExpression(node)) {
      nodes.push(node);
      traversal.skip();
    }
  });
  let text = sf.getFullText();
  const helper =
    `\nfunction __s8loc(f, id) { Object.defineProperty(f, Symbol.for(${JSON.stringify(LOC_KEY)}), { value: id }); return f; }\n`;
  // Insert from the end so earlier positions stay valid.
  for (let i = nodes.length - 1; i >= 0; i--) {
    const n = nodes[i]!;
    text = `${text.slice(0, n.getStart())}__s8loc(${text.slice(n.getStart(), n.getEnd())}, "${fileId}#${i}")${text.slice(n.getEnd())}`;
  }
  return { text: text + helper, nodes };
}

/** The tag of an instrumented function, or undefined for a function the compiler did not see. */
export function locOf(fn: unknown): string | undefined {
  if (typeof fn !== 'function') return undefined;
  const v = (fn as unknown as Record<symbol, unknown>)[Symbol.for(LOC_KEY)];
  return typeof v === 'string' ? v : undefined;
}

import type { StepKind, Target } from '../contracts/logic-version.ts';

/** A mapping function as the author wrote it; the compiler replaces it with JSONata. */
export type DraftExpr = (ctx: never) => unknown;

/** A JSON Schema document (2020-12). */
export type JsonSchemaDoc = Record<string, unknown>;

/**
 * One step in LogicVersion form (contracts/logic-version.ts StepDef), except that expression fields still hold
 * the author's functions. Routing defaults are already applied.
 */
export interface DraftStep {
  readonly kind: StepKind;
  readonly [field: string]: unknown;
}

export interface DraftModule {
  readonly name: string;
  readonly source:
    | { readonly kind: 'wasm'; readonly path: string }
    | { readonly kind: 'assemblyscript'; readonly entry: string; readonly maximumMemoryPages?: number };
  readonly imports: Readonly<Record<string, Target>>;
}

/** A workflow definition as plain data: what `WorkflowBuilder.definition()` returns. */
export interface WorkflowDraft {
  readonly logicId: string;
  readonly version: number;
  readonly domain: string;
  readonly description?: string;
  readonly priority?: number;
  readonly input: JsonSchemaDoc;
  readonly start: string;
  /** In declaration order. */
  readonly steps: readonly { readonly name: string; readonly step: DraftStep }[];
  readonly output?: DraftExpr;
  readonly modules: readonly DraftModule[];
  readonly triggers: readonly { readonly event: string; readonly input: DraftExpr }[];
}

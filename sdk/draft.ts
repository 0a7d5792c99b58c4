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
  /** Days an ended instance is kept (the workflow's `retention` option). */
  readonly retention?: { readonly days: number };
  readonly priority?: number;
  readonly input: JsonSchemaDoc;
  readonly start: string;
  /** In declaration order. */
  readonly steps: readonly { readonly name: string; readonly step: DraftStep }[];
  readonly output?: DraftExpr;
  readonly modules: readonly DraftModule[];
  readonly triggers: readonly DraftTrigger[];
  /** At most `limit` instances not ended per value of `key` (Default: none). */
  readonly concurrency?: { readonly key: DraftExpr; readonly limit: number };
  /** Search attributes, each with its declared type and start mapping where given. */
  readonly attributes?: Readonly<Record<string, { readonly type?: 'string' | 'number' | 'time'; readonly value?: DraftExpr }>>;
  readonly sla?: { readonly within: string };
  /** Declared schedules, as the LogicVersion carries them (checked when declared). */
  readonly schedules: readonly DraftSchedule[];
}

/** A schedule as `.schedule()` declared it: its options are plain data already. */
export interface DraftSchedule {
  readonly name?: string;
  readonly cron: string;
  readonly timezone?: string;
  readonly overlap?: 'skip' | 'buffer_one' | 'allow';
  readonly catchUp?: string;
  readonly input?: unknown;
}

/** A trigger as the draft holds it: a start trigger's input, or a message trigger's match and payload mappings. */
export type DraftTrigger =
  | { readonly event: string; readonly input: DraftExpr }
  | {
      readonly event: string;
      readonly message: string;
      readonly match: { readonly correlationId: DraftExpr } | { readonly attribute: string; readonly value: DraftExpr };
      readonly payload?: DraftExpr;
    };

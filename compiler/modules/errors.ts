/** Error codes of the WASM module build. Stable strings, like every `errors.ts`. */
export const WasmBuildErrorCode = {
  /** asc refused the module; `diagnostics` says where. */
  BUILD: 'COMPILE_WASM_BUILD',
} as const;
export type WasmBuildErrorCode = (typeof WasmBuildErrorCode)[keyof typeof WasmBuildErrorCode];

/** One asc error, located in its source file (1-based line and column). */
export interface WasmBuildDiagnostic {
  file: string;
  line: number;
  column: number;
  /** The TypeScript-style diagnostic code, e.g. 2304. */
  code: number;
  message: string;
}

/** The AssemblyScript compiler rejected a step module. Fix the source at the locations listed. */
export class WasmBuildError extends Error {
  override readonly name = 'WasmBuildError';
  readonly code = WasmBuildErrorCode.BUILD;
  readonly diagnostics: readonly WasmBuildDiagnostic[];

  constructor(entry: string, diagnostics: readonly WasmBuildDiagnostic[], detail?: string) {
    const lines = diagnostics.map((d) => `  ${d.file}:${d.line}:${d.column} TS${d.code}: ${d.message}`);
    if (detail !== undefined && detail !== '') lines.push(`  ${detail}`);
    super(`AssemblyScript build of ${entry} failed:\n${lines.join('\n')}`);
    this.diagnostics = diagnostics;
  }
}

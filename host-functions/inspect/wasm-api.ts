// The tsconfig's lib (ES2023, no DOM) types the WebAssembly namespace but not
// its runtime values, so reach them through globalThis with the two we use.
interface WasmApi {
  validate(bytes: Uint8Array): boolean;
  compile(bytes: Uint8Array): Promise<WebAssembly.Module>;
}

export const wasm = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;

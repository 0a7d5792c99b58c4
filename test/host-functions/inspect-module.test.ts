import { describe, expect, it } from 'vitest';
import { FuncErrorCode, FuncModuleError, inspectModule, sha256Hex } from '../../host-functions/index.ts';
import { engineImports, F64, I32, I64, type RawImport, rawModule } from './helpers/wasm-binary.ts';

const hostCall = (name: string): RawImport => ({ module: 'extism:host/user', name, params: [I64], results: [I64] });
const extism = (name: string, params: number[] = [I64], results: number[] = [I64]): RawImport => ({
  module: 'extism:host/env',
  name,
  params,
  results,
});

function refusal(wasm: Uint8Array, declared: readonly string[] = [], opts = {}): FuncModuleError {
  try {
    inspectModule(wasm, declared, opts);
  } catch (err) {
    if (err instanceof FuncModuleError) return err;
    throw err;
  }
  throw new Error('expected the module to be refused');
}

describe('inspectModule', () => {
  it('accepts Extism env functions, declared host functions and the two clock imports', () => {
    const wasm = rawModule({
      imports: [
        extism('alloc'),
        hostCall('accountHistory'),
        { module: 'env', name: 'Date.now', results: [F64] },
        { module: 'env', name: 'seed', results: [F64] },
      ],
      memory: { min: 1, max: 8 },
    });
    const result = inspectModule(wasm, ['accountHistory', 'unused']);
    expect(result.hostImports).toEqual(['accountHistory']);
    expect(result.memoryMaxPages).toBe(8);
    expect(result.clock).toEqual({ now: true, seed: true });
    expect(result.exports).toEqual(['run']);
  });

  it('lists imports exactly as WebAssembly.Module.imports does', () => {
    const wasm = rawModule({ imports: [extism('length'), hostCall('b'), hostCall('a')] });
    const viaEngine = engineImports(wasm);
    expect(inspectModule(wasm, ['a', 'b']).imports).toEqual(viaEngine);
  });

  it('refuses any WASI import with FUNC_WASI_REFUSED', () => {
    const wasm = rawModule({ imports: [{ module: 'wasi_snapshot_preview1', name: 'fd_write', params: [I32, I32, I32, I32], results: [I32] }] });
    const err = refusal(wasm);
    expect(err.code).toBe(FuncErrorCode.WASI_REFUSED);
    expect(err.message).toContain('wasi_snapshot_preview1::fd_write');
  });

  it('refuses an import outside the allowlist and names it', () => {
    const err = refusal(rawModule({ imports: [{ module: 'env', name: 'abort', params: [I32, I32, I32, I32] }] }));
    expect(err.code).toBe(FuncErrorCode.IMPORT_REFUSED);
    expect(err.message).toContain('env::abort');
  });

  it('refuses a host function the step does not declare, naming it', () => {
    const err = refusal(rawModule({ imports: [hostCall('transferFunds')] }), ['accountHistory']);
    expect(err.code).toBe(FuncErrorCode.IMPORT_REFUSED);
    expect(err.message).toContain('extism:host/user::transferFunds');
  });

  it('refuses an extism:host/env name the runtime does not provide', () => {
    const err = refusal(rawModule({ imports: [extism('exit_process')] }));
    expect(err.code).toBe(FuncErrorCode.IMPORT_REFUSED);
    expect(err.message).toContain('extism:host/env::exit_process');
  });

  it('refuses an imported memory, since the host would then size it', () => {
    const err = refusal(rawModule({ imports: [{ module: 'env', name: 'memory', memory: { min: 1, max: 2 } }], memory: null }));
    expect(err.code).toBe(FuncErrorCode.IMPORT_REFUSED);
    expect(err.message).toContain('memory env::memory');
  });

  it('refuses host functions and clock imports with the wrong signature', () => {
    const wrongCall = rawModule({ imports: [{ module: 'extism:host/user', name: 'a', params: [I32], results: [I32] }] });
    expect(refusal(wrongCall, ['a']).code).toBe(FuncErrorCode.IMPORT_SIGNATURE);
    const wrongClock = rawModule({ imports: [{ module: 'env', name: 'Date.now', results: [I64] }] });
    const err = refusal(wrongClock);
    expect(err.code).toBe(FuncErrorCode.IMPORT_SIGNATURE);
    expect(err.message).toContain('() -> (i64)');
  });

  it('refuses a memory without a maximum with FUNC_NO_MEMORY_CAP', () => {
    expect(refusal(rawModule({ memory: { min: 1 } })).code).toBe(FuncErrorCode.NO_MEMORY_CAP);
  });

  it('refuses a memory maximum above the cap, and accepts one equal to it', () => {
    expect(refusal(rawModule({ memory: { min: 1, max: 257 } })).code).toBe(FuncErrorCode.MEMORY_CAP_TOO_LARGE);
    expect(inspectModule(rawModule({ memory: { min: 1, max: 256 } }), []).memoryMaxPages).toBe(256);
    const err = refusal(rawModule({ memory: { min: 1, max: 32 } }), [], { maxMemoryPages: 16 });
    expect(err.code).toBe(FuncErrorCode.MEMORY_CAP_TOO_LARGE);
    expect(err.message).toContain('32 pages');
  });

  it('accepts a module without memory, whose maximum is then 0', () => {
    expect(inspectModule(rawModule({ memory: null }), []).memoryMaxPages).toBe(0);
  });

  it('checks the hash when one is expected', () => {
    const wasm = rawModule();
    expect(() => inspectModule(wasm, [], { expectedHash: sha256Hex(wasm) })).not.toThrow();
    expect(refusal(wasm, [], { expectedHash: 'ab'.repeat(32) }).code).toBe(FuncErrorCode.HASH_MISMATCH);
  });

  it('refuses bytes that are not WebAssembly with FUNC_INVALID_MODULE', () => {
    expect(refusal(new TextEncoder().encode('#!/bin/sh\nrm -rf /')).code).toBe(FuncErrorCode.INVALID_MODULE);
    const truncated = rawModule().subarray(0, 20);
    expect(refusal(truncated).code).toBe(FuncErrorCode.INVALID_MODULE);
  });
});

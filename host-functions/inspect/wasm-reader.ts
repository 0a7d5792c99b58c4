import { FuncErrorCode, FuncModuleError } from '../errors.ts';

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** A cursor over WebAssembly binary bytes; every read fails as FUNC_INVALID_MODULE past the end. */
export class WasmReader {
  readonly bytes: Uint8Array;
  pos: number;
  readonly end: number;

  constructor(bytes: Uint8Array, start = 0, end = bytes.length) {
    this.bytes = bytes;
    this.pos = start;
    this.end = end;
  }

  get done(): boolean {
    return this.pos >= this.end;
  }

  byte(): number {
    if (this.pos >= this.end) throw invalid('unexpected end of section');
    return this.bytes[this.pos++]!;
  }

  peek(): number {
    if (this.pos >= this.end) throw invalid('unexpected end of section');
    return this.bytes[this.pos]!;
  }

  /** Unsigned LEB128 of up to `maxBits` bits, as a number (exact up to 2^53). */
  uleb(maxBits = 32): number {
    let result = 0;
    let scale = 1;
    for (let shift = 0; shift < maxBits + 7; shift += 7) {
      const b = this.byte();
      result += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) return result;
      scale *= 128;
    }
    throw invalid('LEB128 number too long');
  }

  /** Skips one LEB128 number, signed or unsigned, of any width up to 64 bits. */
  skipLeb(): void {
    for (let i = 0; i < 10; i++) {
      if ((this.byte() & 0x80) === 0) return;
    }
    throw invalid('LEB128 number too long');
  }

  skip(n: number): void {
    if (this.pos + n > this.end) throw invalid('unexpected end of section');
    this.pos += n;
  }

  name(): string {
    const length = this.uleb();
    const start = this.pos;
    this.skip(length);
    try {
      return utf8.decode(this.bytes.subarray(start, start + length));
    } catch {
      throw invalid('a name is not valid UTF-8');
    }
  }
}

export function invalid(detail: string): FuncModuleError {
  return new FuncModuleError(
    FuncErrorCode.INVALID_MODULE,
    `not a valid WebAssembly module: ${detail}; rebuild it with asc or an Extism PDK`,
  );
}

// AssemblyScript (compiled by asc, not tsc): calling a declared host function.
//
// AssemblyScript cannot import a function by a name chosen at run time, so a
// module declares each host function it uses, with the exact ABI
// `extism:host/user::<name>(u64) -> u64`:
//
//   declare class Host {
//     @external("extism:host/user", "accountHistory")
//     static accountHistory(request: u64): u64;
//   }
//   const history = callHost((p: u64): u64 => Host.accountHistory(p), request);
//
// A top-level `@external(...) declare function accountHistory(p: u64): u64;`
// works too; the class form also passes TypeScript linters.
import { Memory } from "@extism/as-pdk";
import { alloc, free, length, store_u64, store_u8 } from "@extism/as-pdk/lib/env";

/**
 * Sends `requestJson` (one JSON value) to a host function and returns the
 * response body, also JSON text. A permanent failure comes back as
 * `{"error":{"code","message","status"}}`; see `isErrorResponse`.
 */
export function callHost(fn: (request: u64) => u64, requestJson: string): string {
  const request = copyToHost(String.UTF8.encode(requestJson));
  const offset = fn(request);
  free(request);
  if (offset === 0) return "null";
  const response = new Memory(offset, length(offset));
  const text = response.toString();
  free(offset);
  return text;
}

/** Copies bytes into a new Extism block, 8 bytes per host call (as-pdk's allocateBytes copies 1). */
function copyToHost(bytes: ArrayBuffer): u64 {
  const size = bytes.byteLength;
  const offset = alloc(size);
  const base = changetype<usize>(bytes);
  let i = 0;
  for (; i + 8 <= size; i += 8) store_u64(offset + i, load<u64>(base + i));
  for (; i < size; i++) store_u8(offset + i, load<u8>(base + i));
  return offset;
}

// One export per way a module can go wrong at run time.
import { Memory } from "@extism/as-pdk";
import { log, readInput, writeOutput } from "../../../host-functions/guest/index";

let spin: i32 = 0;

/** Never returns. */
export function loop(): i32 {
  spin = readInput().length;
  while (spin !== -1) spin = (spin * 31 + 7) & 0x7fffffff;
  return 0;
}

/** Logs, then never returns. */
export function logThenLoop(): i32 {
  log("about to loop");
  return loop();
}

/** Asks for far more linear memory than its --maximumMemory allows. */
export function hugeAlloc(): i32 {
  const buffer = new Uint8Array(64 * 1024 * 1024);
  writeOutput(buffer.length.toString());
  return 0;
}

/** Asks for a buffer larger than any AssemblyScript memory can hold. */
export function impossibleAlloc(): i32 {
  const buffer = new ArrayBuffer(1 << 30);
  writeOutput(buffer.byteLength.toString());
  return 0;
}

/** Asks Extism for a huge host-side block. */
export function hugeHostAlloc(): i32 {
  const block = Memory.allocate(1 << 30);
  writeOutput(block.length.toString());
  return 0;
}

/** Throws: lands in the guest abort handler with this message. */
export function abortWithMessage(): i32 {
  throw new Error("card declined: insufficient funds");
}

/** Traps without a message. */
export function bareTrap(): i32 {
  unreachable();
  return 0;
}

/** Returns without setting an output. */
export function noOutput(): i32 {
  return 0;
}

/** Sets an output that is not JSON. */
export function notJson(): i32 {
  writeOutput("{not json");
  return 0;
}

/** Recurses until the stack runs out. */
export function deepRecursion(): i32 {
  return recurse(readInput().length) + 1;
}

function recurse(n: i32): i32 {
  return n === -1 ? 0 : recurse(n + 1) + 1;
}

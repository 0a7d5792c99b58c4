// AssemblyScript (compiled by asc, not tsc). The build passes this file as an
// extra entry and `--use abort=<this file>/guestAbort`, so every `throw`,
// failed assertion or runtime error of a module lands here.
import { error_set } from "@extism/as-pdk/lib/env";
import { Memory } from "@extism/as-pdk";

/**
 * Reports the failure through Extism's `error_set`, so the host can tell the
 * module's own message apart from a bare trap. The Sentin8 host throws from
 * `error_set`, so control never comes back; under another Extism host the
 * `unreachable` that asc emits after `abort` still stops the module.
 */
// biome-ignore lint/correctness/noUnusedVariables: referenced by `asc --use abort=…/guestAbort`
function guestAbort(
  message: string | null,
  fileName: string | null,
  line: u32,
  column: u32,
): void {
  let text = message === null ? "abort" : message;
  if (fileName !== null) {
    text += " (at " + fileName + ":" + line.toString() + ":" + column.toString() + ")";
  }
  const mem = Memory.allocateString(text);
  error_set(mem.offset);
}

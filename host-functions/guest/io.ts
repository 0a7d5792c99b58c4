// AssemblyScript (compiled by asc, not tsc): step input and output.
import { Host, LogLevel } from "@extism/as-pdk";

/** The step's input: the UTF-8 JSON text the engine passed to the export. */
export function readInput(): string {
  return Host.inputString();
}

/**
 * Sets the step's output. `json` must be one JSON value. Writes the UTF-8
 * bytes (as-pdk's `Host.outputString` sizes by UTF-16 length and cuts
 * non-ASCII text short).
 */
export function writeOutput(json: string): void {
  Host.output(Uint8Array.wrap(String.UTF8.encode(json)));
}

/** Logs through Extism's `log_info`; the host forwards it to its `onLog` hook. */
export function log(message: string): void {
  Host.log(LogLevel.Info, message);
}

/** Logs at error level. */
export function logError(message: string): void {
  Host.log(LogLevel.Error, message);
}

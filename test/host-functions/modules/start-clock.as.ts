// Reads the clock in its start function (top-level code), before any export is called.
import { writeOutput } from "../../../host-functions/guest/index";

const startedAt = Date.now();

export function run(): i32 {
  writeOutput('{"startedAt":' + startedAt.toString() + "}");
  return 0;
}

// Fails in its start function (top-level code), before any export is called.
import { writeOutput } from "../../../host-functions/guest/index";

if (Date.now() > 0) throw new Error("failed while starting");

export function run(): i32 {
  writeOutput("null");
  return 0;
}

// Counts its runs in a global: an instance reused across runs would count past one.
import { writeOutput } from "../../../host-functions/guest/index";

let runs = 0;

export function run(): i32 {
  runs++;
  writeOutput('{"runs":' + runs.toString() + "}");
  return 0;
}

// Returns its input unchanged, no logging: the cheapest useful module (bench).
import { readInput, writeOutput } from "../../../host-functions/guest/index";

export function run(): i32 {
  writeOutput(readInput());
  return 0;
}

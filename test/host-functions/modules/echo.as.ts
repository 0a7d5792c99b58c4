// Echoes its input inside an object and logs it: UTF-8 in, out and in logs.
import { log, readInput, writeOutput } from "../../../host-functions/guest/index";

export function run(): i32 {
  const input = readInput();
  log("echo " + input);
  writeOutput('{"echo":' + input + "}");
  return 0;
}

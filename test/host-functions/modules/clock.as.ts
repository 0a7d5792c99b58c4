// Reads the clock and the random generator, which the host serves from the record.
import { writeOutput } from "../../../host-functions/guest/index";

export function run(): i32 {
  const now = Date.now();
  const a = Math.random();
  const b = Math.random();
  writeOutput('{"now":' + now.toString() + ',"random":[' + a.toString() + "," + b.toString() + "]}");
  return 0;
}

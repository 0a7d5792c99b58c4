// Counts its runs in a global and in memory, and reports its memory's size: an instance reused
// across runs without being put back as it was made would count past one, or start bigger.
// Input {"grow":N} grows memory by N pages first.
import { jsonField, readInput, writeOutput } from "../../../host-functions/guest/index";

let runs = 0;
const cells = new StaticArray<i32>(1);

export function run(): i32 {
  const pages = memory.size();
  const grow = jsonField(readInput(), "grow");
  if (grow !== null) memory.grow(I32.parseInt(grow));
  runs++;
  cells[0] = cells[0] + 1;
  writeOutput('{"runs":' + runs.toString() + ',"cells":' + cells[0].toString() + ',"pages":' + pages.toString() + "}");
  return 0;
}

// Sentin8:Func guest library (AssemblyScript). Import it from a step module:
//   import { readInput, writeOutput, callHost } from "<relative path>/host-functions/guest/index";
export { callHost } from "./host-call";
export { readInput, writeOutput, log, logError } from "./io";
export { quoteJson, jsonField, isErrorResponse } from "./json";

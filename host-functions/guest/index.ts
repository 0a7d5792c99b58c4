// Sentin8:Func guest library (AssemblyScript). Import it from a step module:
//   import { readInput, writeOutput, callHost } from "sentin8-flow/guest";
export { callHost } from "./host-call";
export { readInput, writeOutput, log, logError } from "./io";
export { quoteJson, jsonField, isErrorResponse } from "./json";

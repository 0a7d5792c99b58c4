// Calls `step` until a response says {"stop":true}; after an error response it
// calls `recover` instead. Output: every response, in order. Used by the
// record/replay property test, so its calls depend on earlier responses.
import { callHost, isErrorResponse, jsonField, readInput, writeOutput } from "../../../host-functions/guest/index";

declare class Host {
  @external("extism:host/user", "step")
  static step(request: u64): u64;
  @external("extism:host/user", "recover")
  static recover(request: u64): u64;
}

export function run(): i32 {
  const input = readInput();
  let responses = "";
  let failedBefore = false;
  for (let i = 0; i < 64; i++) {
    const request = '{"i":' + i.toString() + ',"input":' + input + "}";
    const response = failedBefore
      ? callHost((p: u64): u64 => Host.recover(p), request)
      : callHost((p: u64): u64 => Host.step(p), request);
    responses += (i > 0 ? "," : "") + response;
    failedBefore = isErrorResponse(response);
    const stop = jsonField(response, "stop");
    if (stop !== null && stop === "true") break;
  }
  writeOutput('{"responses":[' + responses + "]}");
  return 0;
}

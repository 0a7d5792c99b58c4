// Makes one host call with its input as the request and returns the response.
import { callHost, readInput, writeOutput } from "../../../host-functions/guest/index";

declare class Host {
  @external("extism:host/user", "lookup")
  static lookup(request: u64): u64;
}

export function run(): i32 {
  const response = callHost((p: u64): u64 => Host.lookup(p), readInput());
  writeOutput('{"response":' + response + "}");
  return 0;
}

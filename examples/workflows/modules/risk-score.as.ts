// Risk score for a payment (a Sentin8:Func step module, AssemblyScript).
// Asks the payments service for the account's history through one host function, then scores:
// chargebacks weigh most, large amounts add to it. At 50 or more a human approves the payment.
import { callHost, isErrorResponse, jsonField, readInput, writeOutput } from "sentin8-flow/guest";

declare class Host {
  @external("extism:host/user", "accountHistory")
  static accountHistory(request: u64): u64;
}

export function run(): i32 {
  const input = readInput();
  const account = jsonField(input, "accountId");
  const cents = jsonField(input, "cents");
  const history = callHost((p: u64): u64 => Host.accountHistory(p), '{"accountId":' + account! + "}");
  if (isErrorResponse(history)) {
    writeOutput('{"score":100,"needsApproval":true,"reason":"no account history"}');
    return 0;
  }
  const chargebacks = <i32>parseInt(jsonField(history, "chargebacks")!);
  const amount = <i64>parseInt(cents!);
  let score = chargebacks * 30 + (amount >= 500000 ? 40 : <i32>(amount / 12500));
  if (score > 100) score = 100;
  const reason = chargebacks > 0 ? "chargebacks on record" : "clean history";
  writeOutput('{"score":' + score.toString() + ',"needsApproval":' + (score >= 50 ? "true" : "false") + ',"reason":"' + reason + '"}');
  return 0;
}

import { type Instruction, instructionsOf } from './wasm-instructions.ts';
import { WasmReader } from './wasm-reader.ts';
import type { WasmSections } from './wasm-sections.ts';
import { appendEntries, concat, exportEntry, slebPositive, uleb, withSections } from './wasm-writer.ts';

/** The exported i64 global a metered module counts its fuel down in. */
export const FUEL_EXPORT = 'sentin8:fuel';
/** Calling into JavaScript costs about a hundred plain instructions. */
const HOST_CALL_FUEL = 100;
/** A bulk memory instruction costs one unit per 2^4 = 16 bytes it moves or fills. */
const BULK_SHIFT = 4;

const SECTION = { global: 6, export: 7, code: 10 } as const;
const GLOBAL_KIND = 3;
const I32 = 0x7f;
const I64 = 0x7e;
const OP = {
  unreachable: 0x00, loop: 0x03, if: 0x04, end: 0x0b, call: 0x10, localGet: 0x20, localTee: 0x22, globalGet: 0x23,
  globalSet: 0x24, i64Const: 0x42, i64LtS: 0x53, i64Sub: 0x7d, i64ShrU: 0x88, i64ExtendI32U: 0xad, misc: 0xfc,
} as const;
/** block, loop, if, try: each closed by an `end` (or a try by `delegate`). */
const OPENS = new Set([0x02, 0x03, 0x04, 0x06]);
const DELEGATE = 0x18;
/** memory.init, memory.copy, memory.fill: their byte count is on top of the stack. */
const BULK_MEMORY = new Set([8, 10, 11]);
/** table.init, table.copy, table.fill: work in proportion to a count this meter does not charge. */
const BULK_TABLE = new Set([12, 14, 17]);

/**
 * A copy of the module that counts down the work it does in an exported i64 global
 * (`sentin8:fuel`, starting at `fuel`) and traps with `unreachable` once it drops below zero.
 * This bounds how long a run can hold the thread it runs on, where no timer can stop it.
 *
 * Every function entry and every loop header charges the instructions up to the next such point
 * (a host call counts as HOST_CALL_FUEL), and every bulk memory instruction charges its byte
 * count. Between two charges a run executes only code it has already paid for: forward jumps
 * inside one function, or the rest of a caller after a return. Indices of functions, globals and
 * memories are unchanged (the fuel global comes last), so traps name the same functions.
 *
 * Null when the module cannot be metered (an undecodable body, table bulk instructions, a
 * signature of a newer proposal) or the result does not validate; run it where a timer can
 * stop it instead.
 */
export function meter(bytes: Uint8Array, sections: WasmSections, fuel: number, validate: (b: Uint8Array) => boolean): Uint8Array | null {
  if (!sections.sections.some((s) => s.id === SECTION.export) || sections.exports.some((e) => e.name === FUEL_EXPORT)) return null;
  const fuelGlobal = sections.imports.filter((i) => i.kind === 'global').length + sections.globals.length;
  const importedFunctions = sections.imports.filter((i) => i.kind === 'function').length;
  const bodies: Uint8Array[] = [];
  for (const [i, body] of sections.code.entries()) {
    const params = sections.types[sections.functions[i] ?? -1]?.params.length;
    if (params === undefined) return null;
    let metered: Uint8Array | null;
    try {
      metered = meterBody(bytes, body, { params, fuelGlobal, importedFunctions });
    } catch {
      return null;
    }
    if (metered === null) return null;
    bodies.push(concat([uleb(metered.length), metered]));
  }
  const global = concat([Uint8Array.of(I64, 0x01, OP.i64Const), slebPositive(fuel), Uint8Array.of(OP.end)]);
  const out = withSections(
    bytes,
    sections,
    new Map([
      [SECTION.global, appendEntries(bytes, sections, SECTION.global, sections.globals.length, [global])],
      [SECTION.export, appendEntries(bytes, sections, SECTION.export, sections.exports.length, [exportEntry(FUEL_EXPORT, GLOBAL_KIND, fuelGlobal)])],
      [SECTION.code, concat([uleb(bodies.length), ...bodies])],
    ]),
  );
  return validate(out) ? out : null;
}

interface BodyContext {
  params: number;
  fuelGlobal: number;
  importedFunctions: number;
}

/** One function body (locals and code, without its size) with the charges put in. */
function meterBody(bytes: Uint8Array, body: { start: number; end: number }, ctx: BodyContext): Uint8Array | null {
  const r = new WasmReader(bytes, body.start, body.end);
  const groups = r.uleb();
  const groupsStart = r.pos;
  let locals = 0;
  for (let i = 0; i < groups; i++) {
    locals += r.uleb();
    const type = r.byte();
    if (type === 0x63 || type === 0x64) r.skipLeb();
  }
  const groupsBytes = bytes.subarray(groupsStart, r.pos);
  const code = [...instructionsOf(bytes, body)];
  if (code.some((ins) => ins.op === OP.misc && BULK_TABLE.has(ins.sub!))) return null;
  const bulk = code.some(isBulkMemory);
  // a bulk instruction's byte count is kept in one extra i32 local, after all the others
  const scratch = ctx.params + locals;

  const G = uleb(ctx.fuelGlobal);
  const check = [OP.globalGet, ...G, OP.i64Const, 0x00, OP.i64LtS, OP.if, 0x40, OP.unreachable, OP.end];
  const charge = (units: number) => Uint8Array.from([OP.globalGet, ...G, OP.i64Const, ...slebPositive(units), OP.i64Sub, OP.globalSet, ...G, ...check]);
  const S = uleb(scratch);
  const chargeBytes = Uint8Array.from([
    OP.localTee, ...S, OP.globalGet, ...G, OP.localGet, ...S, OP.i64ExtendI32U, OP.i64Const, BULK_SHIFT, OP.i64ShrU, OP.i64Sub, OP.globalSet, ...G, ...check,
  ]);

  const cost = (ins: Instruction) => {
    if (ins.op !== OP.call) return 1;
    return new WasmReader(bytes, ins.start + 1, ins.end).uleb() < ctx.importedFunctions ? HOST_CALL_FUEL : 1;
  };
  // One charge at the body's start and one inside each loop (per iteration): what the body, or one
  // iteration, can run without passing another charge. That is its own instructions, nested loops
  // being charged themselves; blocks and ifs only jump forward.
  const units = new Map<number, number>([[0, 0]]);
  const scopes = [0];
  const control: boolean[] = []; // open blocks, true for a loop
  for (const [k, ins] of code.entries()) {
    units.set(scopes.at(-1)!, units.get(scopes.at(-1)!)! + cost(ins));
    if (OPENS.has(ins.op)) {
      control.push(ins.op === OP.loop);
      if (ins.op === OP.loop) {
        scopes.push(k + 1);
        units.set(k + 1, 0);
      }
    } else if ((ins.op === OP.end || ins.op === DELEGATE) && control.pop()) scopes.pop();
  }

  const parts: Uint8Array[] = [bulk ? concat([uleb(groups + 1), groupsBytes, Uint8Array.of(0x01, I32)]) : bytes.subarray(body.start, groupsStart + groupsBytes.length)];
  for (const [k, ins] of code.entries()) {
    const site = units.get(k);
    if (site !== undefined) parts.push(charge(Math.max(1, site)));
    if (isBulkMemory(ins)) parts.push(chargeBytes);
    parts.push(bytes.subarray(ins.start, ins.end));
  }
  return concat(parts);
}

function isBulkMemory(ins: Instruction): boolean {
  return ins.op === OP.misc && BULK_MEMORY.has(ins.sub!);
}

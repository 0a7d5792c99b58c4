import type { ArrowFunction, CallExpression, Expression } from 'ts-morph';
import { Node, SyntaxKind } from '../ts-morph.ts';
import { CompileErrorCode } from '../errors.ts';
import { ExprError, nondeterministic, snippet } from './expr-error.ts';
import { atom, type J, operand } from './jsonata-syntax.ts';
import { mixedArray, requireTextable } from './literals.ts';
import { condition } from './operators.ts';
import { bindLambdaParameter } from './scope.ts';
import type { Translator } from './translate-node.ts';
import { elementType, isArrayType, isNumberType, isStringType, mayBeArray } from './types.ts';

/** The pure helpers a mapping may call (documented in docs/sdk.md). */
export const SUPPORTED_HELPERS = [
  'array.map(cb)',
  'array.filter(cb)',
  'array.includes(x)',
  'array.join(sep)',
  'string.includes(s)',
  'string.toUpperCase()',
  'string.toLowerCase()',
  'Math.floor/ceil/abs/round(x)',
  'Math.min/max(a, b, …)',
  'String(x)',
] as const;

const HELPER_HINT = `supported calls: ${SUPPORTED_HELPERS.join(', ')}; move other computation into a func step`;

export function translateCall(t: Translator, node: CallExpression): J {
  if (node.getQuestionDotTokenNode() !== undefined) throw callError(node);
  const callee = node.getExpression();
  const args = node.getArguments();
  if (args.some((a) => Node.isSpreadElement(a))) throw callError(node);
  if (Node.isIdentifier(callee) && callee.getText() === 'String' && t.scope.lookup('String') === undefined && args.length === 1) {
    requireTextable(args[0]!);
    return atom(`$string(${t.expr(args[0]!).code})`);
  }
  if (!Node.isPropertyAccessExpression(callee)) throw callError(node);
  const target = callee.getExpression();
  const method = callee.getName();
  if (Node.isIdentifier(target) && t.scope.lookup(target.getText()) === undefined) {
    const root = target.getText();
    if (root === 'Math') return mathCall(t, node, method, args);
    if (root === 'Date' || root === 'performance' || root === 'crypto') throw nondeterministic(node, `${root}.${method}()`);
    throw callError(node);
  }
  const type = target.getType();
  const recv = () => t.expr(target).code;
  if (isArrayType(type)) {
    if ((method === 'map' || method === 'filter') && args.length === 1) return lambdaCall(t, method, target, args[0]!);
    if (method === 'includes' && args.length === 1) return atom(`(${operand(t.expr(args[0]!))} in ${operand(t.expr(target))})`);
    if (method === 'join' && args.length <= 1) {
      const el = elementType(type);
      if (el === undefined || !isStringType(el)) {
        throw new ExprError(CompileErrorCode.exprType, node, '.join needs an array of strings', 'map the elements to strings first');
      }
      return atom(`$join(${recv()}, ${args[0] === undefined ? '","' : t.expr(args[0]).code})`);
    }
  }
  if (isStringType(type)) {
    if (method === 'toUpperCase' && args.length === 0) return atom(`$uppercase(${recv()})`);
    if (method === 'toLowerCase' && args.length === 0) return atom(`$lowercase(${recv()})`);
    if (method === 'includes' && args.length === 1 && isStringType(args[0]!.getType())) {
      return atom(`$contains(${recv()}, ${t.expr(args[0]!).code})`);
    }
  }
  throw callError(node);
}

function callError(node: CallExpression): ExprError {
  return new ExprError(CompileErrorCode.exprCall, node, `the call "${snippet(node)}" is not supported in a mapping`, HELPER_HINT);
}

function mathCall(t: Translator, node: CallExpression, method: string, args: Node[]): J {
  if (method === 'random') throw nondeterministic(node, 'Math.random()');
  for (const a of args) {
    if (!isNumberType(a.getType())) throw new ExprError(CompileErrorCode.exprType, a, `Math.${method} needs numbers`);
  }
  const one = args.length === 1 ? t.expr(args[0]!).code : null;
  if (one !== null && (method === 'floor' || method === 'ceil' || method === 'abs')) return atom(`$${method}(${one})`);
  if (one !== null && method === 'round') {
    // $round rounds half to even; Math.round rounds half up. floor(x) + (x - floor(x) >= 0.5) is exact.
    const [x, f] = [t.fresh('x'), t.fresh('f')];
    return atom(`(${x} := ${one}; ${f} := $floor(${x}); ${x} - ${f} >= 0.5 ? ${f} + 1 : ${f})`);
  }
  if ((method === 'min' || method === 'max') && args.length >= 1) {
    return atom(`$${method}([${args.map((a) => t.expr(a).code).join(', ')}])`);
  }
  throw callError(node);
}

/** `xs.map(x => e)` → `[$map(xs, function($x){ e })]`; the array constructor keeps 0/1-element results arrays. */
function lambdaCall(t: Translator, method: 'map' | 'filter', target: Expression, cb: Node): J {
  if (!Node.isArrowFunction(cb)) {
    throw new ExprError(CompileErrorCode.exprFunction, cb, `the callback of .${method} must be an inline arrow function`);
  }
  if (cb.isAsync()) throw new ExprError(CompileErrorCode.exprAsync, cb, 'async callbacks are not supported');
  const params = cb.getParameters();
  if (params.length > 2) throw new ExprError(CompileErrorCode.exprParameter, params[2]!, `.${method} callbacks take (item, index) only`);
  const variables: string[] = [];
  let scope = t.scope;
  for (const [i, p] of params.entries()) {
    const bound = bindLambdaParameter(p, t.fresh(i === 0 ? 'e' : 'i'));
    variables.push(bound.variable);
    scope = scope.with(bound.bindings);
  }
  const inner = t.withScope(scope);
  const body = arrowBody(cb);
  const xs = t.expr(target).code;
  const params_ = variables.join(', ');
  // A one-element $map/$filter result collapses, and an enclosing [] flattens array results; so
  // arrays of arrays are built with $reduce and explicitly wrapped elements instead.
  if (method === 'map') {
    const bodyType = body.getType();
    if (!mayBeArray(bodyType)) return atom(`[$map(${xs}, function(${params_}) { ${inner.expr(body).code} })]`);
    if (!isArrayType(bodyType)) throw mixedArray(body);
    const acc = t.fresh('acc');
    const args = [acc, variables[0] ?? t.fresh('e'), ...variables.slice(1)].join(', ');
    return atom(`$reduce(${xs}, function(${args}) { $append(${acc}, [[$append([], ${inner.expr(body).code})]]) }, [])`);
  }
  const el = elementType(target.getType());
  if (el === undefined || !mayBeArray(el)) return atom(`[$filter(${xs}, function(${params_}) { ${condition(inner, body)} })]`);
  if (!isArrayType(el)) throw mixedArray(target);
  const acc = t.fresh('acc');
  const item = variables[0] ?? t.fresh('e');
  const args = [acc, item, ...variables.slice(1)].join(', ');
  return atom(`$reduce(${xs}, function(${args}) { ${condition(inner, body)} ? $append(${acc}, [[$append([], ${item})]]) : ${acc} }, [])`);
}

/** The returned expression of an arrow: its expression body, or a block of exactly `return expr;`. */
export function arrowBody(fn: ArrowFunction | Node): Node {
  if (!Node.isArrowFunction(fn) && !Node.isFunctionExpression(fn)) return fn;
  const body = fn.getBody();
  if (!Node.isBlock(body)) return body;
  const statements = body.getStatements();
  const loop = body.getFirstDescendant((d) =>
    [SyntaxKind.ForStatement, SyntaxKind.ForOfStatement, SyntaxKind.ForInStatement, SyntaxKind.WhileStatement, SyntaxKind.DoStatement].includes(
      d.getKind(),
    ),
  );
  if (loop !== undefined) throw new ExprError(CompileErrorCode.exprLoop, loop, 'loops are not supported in a mapping', 'use .map/.filter, or move the computation into a func step');
  const only = statements[0];
  if (statements.length === 1 && only !== undefined && Node.isReturnStatement(only) && only.getExpression() !== undefined) {
    return only.getExpression()!;
  }
  const offending = statements.find((s) => !Node.isReturnStatement(s)) ?? body;
  throw new ExprError(
    CompileErrorCode.exprStatement,
    offending,
    'a mapping body must be a single expression (or `{ return expr; }`)',
    'inline the intermediate values, or move computation into a func step',
  );
}

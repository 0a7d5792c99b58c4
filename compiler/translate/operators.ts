import type { BinaryExpression, ConditionalExpression, PrefixUnaryExpression } from 'ts-morph';
import { Node, SyntaxKind } from '../ts-morph.ts';
import { CompileErrorCode } from '../errors.ts';
import { ExprError, snippet } from './expr-error.ts';
import { atom, type J, op, operand } from './jsonata-syntax.ts';
import { requireTextable } from './literals.ts';
import type { Translator } from './translate-node.ts';
import { isBooleanType, isNumberType, isPrimitiveType, isStringType, mayBeString, mayBeUndefined } from './types.ts';

const ARITHMETIC = new Set(['-', '*', '/', '%']);
const RELATIONAL = new Set(['<', '<=', '>', '>=']);
const ASSIGNMENTS = new Set(['=', '+=', '-=', '*=', '/=', '%=', '**=', '&&=', '||=', '??=', '&=', '|=', '^=', '<<=', '>>=', '>>>=']);

export function translateBinary(t: Translator, node: BinaryExpression): J {
  const operator = node.getOperatorToken().getText();
  const left = node.getLeft();
  const right = node.getRight();
  if (ASSIGNMENTS.has(operator)) throw new ExprError(CompileErrorCode.exprAssignment, node, 'mappings cannot assign: they compute a new value');
  if (operator === '+') return plus(t, node, left, right);
  if (ARITHMETIC.has(operator)) {
    const [l, r] = [operand(t.expr(left)), operand(t.expr(right))];
    requireNumbers(node, left, right);
    return op(`${l} ${operator} ${r}`);
  }
  if (operator === '**') {
    const [l, r] = [t.expr(left).code, t.expr(right).code];
    requireNumbers(node, left, right);
    return atom(`$power(${l}, ${r})`);
  }
  if (RELATIONAL.has(operator)) {
    const [l, r] = [operand(t.expr(left)), operand(t.expr(right))];
    const [lt, rt] = [left.getType(), right.getType()];
    if (!((isNumberType(lt) && isNumberType(rt)) || (isStringType(lt) && isStringType(rt)))) {
      throw new ExprError(CompileErrorCode.exprType, node, `"${snippet(node)}" must compare two numbers or two strings`);
    }
    return op(`${l} ${operator} ${r}`);
  }
  if (operator === '===' || operator === '!==') return equality(t, node, left, right, operator === '===');
  if (operator === '==' || operator === '!=') return looseNull(t, node, left, right, operator === '==');
  if (operator === '&&' || operator === '||') return logical(t, left, right, operator);
  if (operator === '??') {
    const l = operand(t.expr(left));
    return op(`${l} != null ? ${l} : ${operand(t.expr(right))}`);
  }
  throw new ExprError(CompileErrorCode.exprOperator, node.getOperatorToken(), `the operator ${operator} is not supported in a mapping`);
}

function plus(t: Translator, node: Node, left: Node, right: Node): J {
  const [l, r] = [operand(t.expr(left)), operand(t.expr(right))];
  if (mayBeString(left.getType()) || mayBeString(right.getType())) {
    requireTextable(left);
    requireTextable(right);
    return op(`${l} & ${r}`);
  }
  requireNumbers(node, left, right);
  return op(`${l} + ${r}`);
}

function requireNumbers(node: Node, left: Node, right: Node): void {
  if (!isNumberType(left.getType()) || !isNumberType(right.getType())) {
    throw new ExprError(CompileErrorCode.exprType, node, `"${snippet(node)}" needs numbers on both sides`);
  }
}

const isUndefinedKeyword = (t: Translator, n: Node) =>
  Node.isIdentifier(n) && n.getText() === 'undefined' && t.scope.lookup('undefined') === undefined;

function equality(t: Translator, node: Node, left: Node, right: Node, equal: boolean): J {
  for (const [a, b] of [
    [left, right],
    [right, left],
  ] as const) {
    if (isUndefinedKeyword(t, b)) {
      const exists = `$exists(${t.expr(a).code})`;
      return atom(equal ? `$not(${exists})` : exists);
    }
  }
  const [lt, rt] = [left.getType(), right.getType()];
  if (!isPrimitiveType(lt) && !isPrimitiveType(rt)) {
    throw new ExprError(
      CompileErrorCode.exprEquality,
      node,
      `"${snippet(node)}" compares two values that may be objects: JavaScript compares identity, JSONata compares content`,
      'compare a field, e.g. a.id === b.id',
    );
  }
  const [l, r] = [operand(t.expr(left)), operand(t.expr(right))];
  // JSONata's comparisons are false whenever a side is undefined; JavaScript's are not.
  const eq =
    mayBeUndefined(lt) && mayBeUndefined(rt) ? `(${l} = ${r} or ($not($exists(${l})) and $not($exists(${r}))))` : `${l} = ${r}`;
  if (equal) return op(eq);
  return mayBeUndefined(lt) || mayBeUndefined(rt) ? atom(`$not(${eq})`) : op(`${l} != ${r}`);
}

function looseNull(t: Translator, node: Node, left: Node, right: Node, equal: boolean): J {
  const other = right.isKind(SyntaxKind.NullKeyword) ? left : left.isKind(SyntaxKind.NullKeyword) ? right : null;
  if (other === null) {
    throw new ExprError(CompileErrorCode.exprEquality, node, `loose equality "${snippet(node)}" is not supported`, 'use === or !==');
  }
  const v = operand(t.expr(other));
  return op(equal ? `${v} = null or $not($exists(${v}))` : `${v} != null`);
}

function logical(t: Translator, left: Node, right: Node, operator: '&&' | '||'): J {
  const [lt, rt] = [left.getType(), right.getType()];
  if (isBooleanType(lt) && isBooleanType(rt)) {
    return op(`${operand(t.expr(left))} ${operator === '&&' ? 'and' : 'or'} ${operand(t.expr(right))}`);
  }
  // JavaScript returns an operand, not a boolean.
  const l = operand(t.expr(left));
  const c = condition(t, left);
  const r = operand(t.expr(right));
  return op(operator === '&&' ? `${c} ? ${r} : ${l}` : `${c} ? ${l} : ${r}`);
}

/**
 * A JSONata condition with JavaScript's truthiness. JSONata casts like JavaScript for primitives,
 * but treats `{}` and `[]` as false; those need an explicit test.
 */
export function condition(t: Translator, node: Node): string {
  const j = t.expr(node);
  const type = node.getType();
  if (isPrimitiveType(type)) return operand(j);
  const v = t.fresh('t');
  return `(${v} := ${j.code}; ${v} != null and ${v} != false and ${v} != 0 and ${v} != "")`;
}

export function translatePrefix(t: Translator, node: PrefixUnaryExpression): J {
  const operand_ = node.getOperand();
  switch (node.getOperatorToken()) {
    case SyntaxKind.ExclamationToken:
      if (isBooleanType(operand_.getType())) return atom(`$not(${t.expr(operand_).code})`);
      return op(`${condition(t, operand_)} ? false : true`);
    case SyntaxKind.MinusToken:
      if (!isNumberType(operand_.getType())) throw new ExprError(CompileErrorCode.exprType, node, `"${snippet(node)}" negates a non-number`);
      return op(`-${operand(t.expr(operand_))}`);
    case SyntaxKind.PlusPlusToken:
    case SyntaxKind.MinusMinusToken:
      throw new ExprError(CompileErrorCode.exprAssignment, node, 'mappings cannot change values (++/--)');
    default:
      throw new ExprError(CompileErrorCode.exprOperator, node, `the prefix operator in "${snippet(node)}" is not supported`);
  }
}

export function translateConditional(t: Translator, node: ConditionalExpression): J {
  const c = condition(t, node.getCondition());
  const [whenTrue, whenFalse] = [node.getWhenTrue(), node.getWhenFalse()];
  const undef = (n: Node) => isUndefinedKeyword(t, n);
  if (undef(whenFalse)) return op(`${c} ? ${operand(t.expr(whenTrue))}`);
  // `()` is JSONata's empty block: it evaluates to undefined.
  if (undef(whenTrue)) return op(`${c} ? () : ${operand(t.expr(whenFalse))}`);
  return op(`${c} ? ${operand(t.expr(whenTrue))} : ${operand(t.expr(whenFalse))}`);
}

import type { Expression } from 'ts-morph';
import { Node, SyntaxKind } from '../ts-morph.ts';
import { CompileErrorCode } from '../errors.ts';
import { translateCall } from './calls.ts';
import { ExprError, nondeterministic, snippet } from './expr-error.ts';
import { atom, type J, operand, stringLiteral } from './jsonata-syntax.ts';
import { translateArray, translateObject, translateTemplate } from './literals.ts';
import { translateBinary, translateConditional, translatePrefix } from './operators.ts';
import { member, ROOT, type Scope } from './scope.ts';
import { isArrayType, isStringType } from './types.ts';

/** State shared while translating one mapping. */
export interface Translator {
  readonly scope: Scope;
  expr(node: Node): J;
  withScope(scope: Scope): Translator;
  /** A fresh JSONata variable name for temporaries. */
  fresh(prefix: string): string;
}

const NONDETERMINISTIC_ROOTS = new Set(['Date', 'performance', 'crypto']);

export function createTranslator(scope: Scope, counter = { n: 0 }): Translator {
  const t: Translator = {
    scope,
    expr: (node) => translateNode(t, node),
    withScope: (s) => createTranslator(s, counter),
    fresh: (prefix) => `$__${prefix}${counter.n++}`,
  };
  return t;
}

function translateNode(t: Translator, node: Node): J {
  // Type-only wrappers do not exist at run time.
  if (Node.isParenthesizedExpression(node)) return t.expr(node.getExpression());
  if (Node.isAsExpression(node) || Node.isSatisfiesExpression(node) || Node.isNonNullExpression(node)) {
    return t.expr(node.getExpression());
  }
  if (Node.isTypeAssertion(node)) return t.expr(node.getExpression());
  if (Node.isNumericLiteral(node)) return atom(numberLiteral(node.getLiteralValue(), node));
  if (Node.isStringLiteral(node) || Node.isNoSubstitutionTemplateLiteral(node)) return atom(stringLiteral(node.getLiteralValue()));
  if (node.isKind(SyntaxKind.TrueKeyword)) return atom('true');
  if (node.isKind(SyntaxKind.FalseKeyword)) return atom('false');
  if (node.isKind(SyntaxKind.NullKeyword)) return atom('null');
  if (Node.isIdentifier(node)) return identifier(t, node);
  if (Node.isPropertyAccessExpression(node)) return propertyAccess(t, node);
  if (Node.isElementAccessExpression(node)) return elementAccess(t, node);
  if (Node.isTemplateExpression(node)) return translateTemplate(t, node);
  if (Node.isObjectLiteralExpression(node)) return translateObject(t, node);
  if (Node.isArrayLiteralExpression(node)) return translateArray(t, node);
  if (Node.isBinaryExpression(node)) return translateBinary(t, node);
  if (Node.isPrefixUnaryExpression(node)) return translatePrefix(t, node);
  if (Node.isConditionalExpression(node)) return translateConditional(t, node);
  if (Node.isCallExpression(node)) return translateCall(t, node);
  return unsupported(node);
}

function numberLiteral(value: number, node: Node): string {
  if (!Number.isFinite(value)) throw new ExprError(CompileErrorCode.exprUnsupported, node, 'this number has no JSON form');
  return JSON.stringify(value);
}

function identifier(t: Translator, node: Node): J {
  const name = node.getText();
  const bound = t.scope.lookup(name);
  if (bound !== undefined) return atom(bound);
  if (name === 'undefined') {
    throw new ExprError(
      CompileErrorCode.exprUndefined,
      node,
      '`undefined` has no JSONata value here',
      'leave the field out, use `cond ? value : undefined` in an object field, or compare with `=== undefined`',
    );
  }
  throw new ExprError(
    CompileErrorCode.exprClosure,
    node,
    `"${name}" is not a parameter of this mapping: a mapping cannot capture outer variables`,
    'mappings see only their context ({ input, steps, workflow, decision, item, index }); write constants inline, ' +
      'pass values through the workflow input, or move computation into a func step',
  );
}

function propertyAccess(t: Translator, node: Node & { getExpression(): Expression; getName(): string }): J {
  const target = node.getExpression();
  const name = node.getName();
  if (Node.isIdentifier(target) && t.scope.lookup(target.getText()) === undefined) {
    if (target.getText() === 'Math' && name === 'random') throw nondeterministic(node, 'Math.random');
    if (NONDETERMINISTIC_ROOTS.has(target.getText())) throw nondeterministic(node, target.getText());
  }
  const base = t.expr(target);
  if (name === 'length') {
    const type = target.getType();
    // JavaScript counts UTF-16 code units; $length counts code points, so split into units first.
    if (isStringType(type)) return atom(`$count($split(${base.code}, ""))`);
    if (isArrayType(type)) return atom(`$count(${base.code})`);
    throw new ExprError(CompileErrorCode.exprType, node, `cannot tell whether "${snippet(target)}" is a string or an array`, 'give it a string or array type');
  }
  if (!base.atom) return atom(`${operand(base)}.${member(ROOT, name, node)}`);
  return atom(member(base.code, name, node));
}

function elementAccess(t: Translator, node: Node & { getArgumentExpression(): Expression | undefined; getExpression(): Expression }): J {
  const arg = node.getArgumentExpression();
  if (arg !== undefined && (Node.isStringLiteral(arg) || Node.isNoSubstitutionTemplateLiteral(arg))) {
    const base = t.expr(node.getExpression());
    return atom(member(base.atom ? base.code : operand(base), arg.getLiteralValue(), node));
  }
  throw new ExprError(
    CompileErrorCode.exprComputedAccess,
    node,
    `computed access "${snippet(node)}" is not supported`,
    'use a property path (a.b), .map/.filter, or precompute the value in an earlier step',
  );
}

function unsupported(node: Node): never {
  const kind = node.getKindName();
  if (Node.isArrowFunction(node) || Node.isFunctionExpression(node)) {
    throw new ExprError(CompileErrorCode.exprFunction, node, 'a function value is only supported as the callback of .map or .filter');
  }
  if (Node.isNewExpression(node)) {
    const callee = node.getExpression().getText();
    if (callee === 'Date') throw nondeterministic(node, 'new Date()');
    throw new ExprError(CompileErrorCode.exprNew, node, `\`new ${callee}\` is not supported`);
  }
  if (Node.isAwaitExpression(node)) throw new ExprError(CompileErrorCode.exprAsync, node, 'await is not supported: mappings are synchronous');
  if (Node.isRegularExpressionLiteral(node)) throw new ExprError(CompileErrorCode.exprRegex, node, 'regular expressions are not supported');
  if (node.isKind(SyntaxKind.ThisKeyword)) throw new ExprError(CompileErrorCode.exprThis, node, '`this` is not supported in a mapping');
  if (Node.isPostfixUnaryExpression(node)) throw new ExprError(CompileErrorCode.exprAssignment, node, 'mappings cannot change values (++/--)');
  if (Node.isTypeOfExpression(node) || Node.isVoidExpression(node) || Node.isDeleteExpression(node)) {
    throw new ExprError(CompileErrorCode.exprOperator, node, `the ${snippet(node).split(' ')[0]} operator is not supported`);
  }
  if (Node.isTaggedTemplateExpression(node)) throw new ExprError(CompileErrorCode.exprCall, node, 'tagged templates are calls, which are not supported');
  throw new ExprError(CompileErrorCode.exprUnsupported, node, `${kind} "${snippet(node)}" is not supported in a mapping`);
}

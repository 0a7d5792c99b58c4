import type { ObjectLiteralExpression, TemplateExpression, ArrayLiteralExpression } from 'ts-morph';
import { Node, SyntaxKind } from '../ts-morph.ts';
import { CompileErrorCode } from '../errors.ts';
import { ExprError, snippet } from './expr-error.ts';
import { atom, type J, op, operand, stringLiteral } from './jsonata-syntax.ts';
import type { Translator } from './translate-node.ts';
import { isArrayType, isTextable, mayBeArray, mayBeNull, mayBeUndefined } from './types.ts';

/** `a${x}b` → `"a" & x & "b"`; only text-like values may be interpolated. */
export function translateTemplate(t: Translator, node: TemplateExpression): J {
  const parts: string[] = [];
  const head = node.getHead().getLiteralText();
  if (head !== '') parts.push(stringLiteral(head));
  for (const span of node.getTemplateSpans()) {
    const expr = span.getExpression();
    requireTextable(expr);
    parts.push(operand(t.expr(expr)));
    const text = span.getLiteral().getLiteralText();
    if (text !== '') parts.push(stringLiteral(text));
  }
  if (parts.length === 1) return atom(`$string(${parts[0]})`);
  return op(parts.join(' & '));
}

/** JavaScript prints `undefined` and objects differently from JSONata, so only text-like values qualify. */
export function requireTextable(expr: Node): void {
  if (!isTextable(expr.getType())) {
    throw new ExprError(
      CompileErrorCode.exprType,
      expr,
      `"${snippet(expr)}" may not be a string, number or boolean, so it cannot be turned into text the same way`,
      'narrow it first, e.g. `x ?? ""`',
    );
  }
}

/** Object literals become JSONata object constructors; spreads become `$merge`. */
export function translateObject(t: Translator, node: ObjectLiteralExpression): J {
  const groups: string[] = [];
  let fields: string[] = [];
  const flush = () => {
    if (fields.length > 0) groups.push(`{${fields.join(', ')}}`);
    fields = [];
  };
  for (const prop of node.getProperties()) {
    if (Node.isSpreadAssignment(prop)) {
      const expr = prop.getExpression();
      if (mayBeNull(expr.getType()) || mayBeArray(expr.getType())) {
        throw new ExprError(CompileErrorCode.exprType, expr, `spread of "${snippet(expr)}", which may be null or an array, is not supported`, 'spread only objects');
      }
      flush();
      groups.push(operand(t.expr(expr)));
      continue;
    }
    if (Node.isShorthandPropertyAssignment(prop)) {
      fields.push(`${stringLiteral(prop.getName())}: ${t.expr(prop.getNameNode()).code}`);
      continue;
    }
    if (Node.isPropertyAssignment(prop)) {
      const nameNode = prop.getNameNode();
      if (Node.isComputedPropertyName(nameNode)) {
        throw new ExprError(CompileErrorCode.exprComputedKey, nameNode, `computed key ${snippet(nameNode)} is not supported`, 'write the key literally');
      }
      const key = Node.isStringLiteral(nameNode) || Node.isNumericLiteral(nameNode) ? String(nameNode.getLiteralValue()) : nameNode.getText();
      const init = prop.getInitializerOrThrow();
      // A field set to undefined disappears from the JSON, as it does from a JSONata object.
      if (init.isKind(SyntaxKind.Identifier) && init.getText() === 'undefined' && t.scope.lookup('undefined') === undefined) continue;
      fields.push(`${stringLiteral(key)}: ${t.expr(init).code}`);
      continue;
    }
    throw new ExprError(CompileErrorCode.exprFunction, prop, 'methods and accessors are not supported in a mapping object');
  }
  if (groups.length === 0) return atom(`{${fields.join(', ')}}`);
  flush();
  return atom(`$merge([${groups.join(', ')}])`);
}

/** Array literals: array-valued elements are wrapped so the constructor does not flatten them; spreads flatten. */
export function translateArray(t: Translator, node: ArrayLiteralExpression): J {
  const items = node.getElements().map((el) => {
    if (Node.isSpreadElement(el)) return operand(t.expr(el.getExpression()));
    if (Node.isOmittedExpression(el)) throw new ExprError(CompileErrorCode.exprUnsupported, node, 'array holes are not supported');
    const type = el.getType();
    if (mayBeUndefined(type)) {
      throw new ExprError(CompileErrorCode.exprType, el, `array element "${snippet(el)}" may be undefined, which JSONata drops`, 'use `?? null`');
    }
    const j = t.expr(el);
    // An array constructor flattens array values it did not construct itself; $append copies the
    // value into a plain array, and the outer [] makes it one element (measured in notes).
    if (Node.isArrayLiteralExpression(el) || !mayBeArray(type)) return j.code;
    if (!isArrayType(type)) throw mixedArray(el);
    return `[$append([], ${j.code})]`;
  });
  return atom(`[${items.join(', ')}]`);
}

/** A value that may or may not be an array: JSONata would flatten it in some runs only. */
export function mixedArray(node: Node): ExprError {
  return new ExprError(
    CompileErrorCode.exprType,
    node,
    `"${snippet(node)}" may or may not be an array, which JSONata's array constructor cannot keep apart`,
    'give it a precise type (declare the step output schema)',
  );
}

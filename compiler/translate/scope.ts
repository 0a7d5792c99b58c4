import type { BindingElement, Node, ParameterDeclaration } from 'ts-morph';
import { SyntaxKind } from '../ts-morph.ts';
import { CompileErrorCode } from '../errors.ts';
import { ExprError } from './expr-error.ts';
import { fieldName, variableName } from './jsonata-syntax.ts';

/** The root of the evaluation context: fields of the context are bare names at the top level. */
export const ROOT = '$$';

/** What each name a mapping may use stands for in JSONata. */
export class Scope {
  private readonly bindings: ReadonlyMap<string, string>;
  constructor(bindings: ReadonlyMap<string, string> = new Map()) {
    this.bindings = bindings;
  }
  lookup(name: string): string | undefined {
    return this.bindings.get(name);
  }
  with(entries: Iterable<[string, string]>): Scope {
    return new Scope(new Map([...this.bindings, ...entries]));
  }
}

/** `base.name` in JSONata, where `base` is a path or the context root. */
export function member(base: string, name: string, at: Node): string {
  const field = fieldName(name);
  if (field === null) throw new ExprError(CompileErrorCode.exprUnsupported, at, `the field name "${name}" cannot be written in JSONata`);
  return base === ROOT ? field : `${base}.${field}`;
}

/**
 * Binds the parameter of a top-level mapping: `ctx` (the whole context) or a destructuring such as
 * `{ input, steps: { reserve } }`. Only the context fields in `roots` may be named.
 */
export function bindContextParameter(param: ParameterDeclaration, roots: readonly string[]): [string, string][] {
  checkPlainParameter(param);
  const name = param.getNameNode();
  if (name.isKind(SyntaxKind.Identifier)) return [[name.getText(), ROOT]];
  if (name.isKind(SyntaxKind.ObjectBindingPattern)) {
    return name.getElements().flatMap((el) => bindElement(el, ROOT, roots));
  }
  throw new ExprError(CompileErrorCode.exprParameter, name, 'an array pattern cannot destructure the mapping context');
}

/** Binds a `.map`/`.filter` callback parameter to a JSONata lambda variable. */
export function bindLambdaParameter(param: ParameterDeclaration, fallback: string): { variable: string; bindings: [string, string][] } {
  checkPlainParameter(param);
  const name = param.getNameNode();
  if (name.isKind(SyntaxKind.Identifier)) {
    const variable = variableName(name.getText());
    if (variable === null) throw new ExprError(CompileErrorCode.exprParameter, name, `the parameter name "${name.getText()}" is not supported`);
    return { variable, bindings: [[name.getText(), variable]] };
  }
  if (name.isKind(SyntaxKind.ObjectBindingPattern)) {
    return { variable: fallback, bindings: name.getElements().flatMap((el) => bindElement(el, fallback, null)) };
  }
  throw new ExprError(CompileErrorCode.exprParameter, name, 'array patterns are not supported in callbacks');
}

function checkPlainParameter(param: ParameterDeclaration): void {
  if (param.getInitializer() !== undefined) {
    throw new ExprError(CompileErrorCode.exprParameter, param, 'a parameter default value is not supported', 'use `??` in the body instead');
  }
  if (param.getDotDotDotToken() !== undefined) {
    throw new ExprError(CompileErrorCode.exprParameter, param, 'a rest parameter is not supported');
  }
}

function bindElement(el: BindingElement, base: string, roots: readonly string[] | null): [string, string][] {
  if (el.getDotDotDotToken() !== undefined) {
    throw new ExprError(CompileErrorCode.exprParameter, el, 'a rest element (...) in a destructuring is not supported', 'name the fields you need');
  }
  if (el.getInitializer() !== undefined) {
    throw new ExprError(CompileErrorCode.exprParameter, el, 'a default value in a destructuring is not supported', 'use `??` in the body instead');
  }
  const prop = el.getPropertyNameNode();
  if (prop !== undefined && !prop.isKind(SyntaxKind.Identifier) && !prop.isKind(SyntaxKind.StringLiteral)) {
    throw new ExprError(CompileErrorCode.exprComputedKey, prop, 'a computed key in a destructuring is not supported');
  }
  const nameNode = el.getNameNode();
  const key = prop === undefined ? nameNode.getText() : prop.isKind(SyntaxKind.StringLiteral) ? prop.getLiteralText() : prop.getText();
  if (roots !== null && !roots.includes(key)) {
    throw new ExprError(CompileErrorCode.exprParameter, el, `"${key}" is not in this mapping's context (${roots.join(', ')})`);
  }
  const path = member(base, key, el);
  if (nameNode.isKind(SyntaxKind.Identifier)) return [[nameNode.getText(), path]];
  if (nameNode.isKind(SyntaxKind.ObjectBindingPattern)) return nameNode.getElements().flatMap((e) => bindElement(e, path, null));
  throw new ExprError(CompileErrorCode.exprParameter, nameNode, 'array patterns are not supported in a destructuring');
}

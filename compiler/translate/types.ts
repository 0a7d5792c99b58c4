import type { Type } from 'ts-morph';

/** Classifies TypeScript types for the choices JSONata forces (`&` vs `+`, `$count` vs length…). */

function members(t: Type): Type[] {
  return t.isUnion() ? t.getUnionTypes() : [t];
}

const isStringMember = (t: Type) => t.isString() || t.isStringLiteral() || t.isTemplateLiteral();
const isNumberMember = (t: Type) => t.isNumber() || t.isNumberLiteral();
const isBooleanMember = (t: Type) => t.isBoolean() || t.isBooleanLiteral();

export const isStringType = (t: Type): boolean => members(t).every(isStringMember);
export const isNumberType = (t: Type): boolean => members(t).every(isNumberMember);
export const isBooleanType = (t: Type): boolean => members(t).every(isBooleanMember);
export const mayBeString = (t: Type): boolean => members(t).some(isStringMember);

export const mayBeUndefined = (t: Type): boolean =>
  t.isAny() || t.isUnknown() || members(t).some((m) => m.isUndefined() || m.isVoid());
export const mayBeNull = (t: Type): boolean => t.isAny() || t.isUnknown() || members(t).some((m) => m.isNull());

/** string, number, boolean, null or undefined in every member: JSONata's truthiness equals JavaScript's. */
export function isPrimitiveType(t: Type): boolean {
  if (t.isAny() || t.isUnknown()) return false;
  return members(t).every(
    (m) => isStringMember(m) || isNumberMember(m) || isBooleanMember(m) || m.isNull() || m.isUndefined(),
  );
}

/** string, number or boolean and never null or undefined: safe to turn into text with `&`. */
export function isTextable(t: Type): boolean {
  return members(t).every((m) => isStringMember(m) || isNumberMember(m) || isBooleanMember(m));
}

/** An array or tuple, ignoring null and undefined members. */
export function isArrayType(t: Type): boolean {
  const ms = members(t).filter((m) => !m.isNull() && !m.isUndefined());
  return ms.length > 0 && ms.every((m) => m.isArray() || m.isReadonlyArray() || m.isTuple());
}

/** May hold an array at run time (so an array constructor would flatten it). */
export function mayBeArray(t: Type): boolean {
  return t.isAny() || t.isUnknown() || members(t).some((m) => m.isArray() || m.isReadonlyArray() || m.isTuple());
}

/** The element type of an array type, when it has one. */
export function elementType(t: Type): Type | undefined {
  const m = members(t).find((x) => x.isArray() || x.isReadonlyArray());
  return m?.getArrayElementType() ?? m?.getTypeArguments()[0];
}

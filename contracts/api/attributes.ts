import { z } from 'zod';
import { text } from './storable.ts';

/**
 * Search-attribute filters (docs/search-attributes.md), one syntax for the listing's query string
 * (`attr.accountId=acct-2`, `attr.amount.gte=100`) and a bulk job's filter
 * (`attributes: { accountId: 'acct-2', 'amount.gte': '100' }`): a name alone is equality; a name
 * and `.gt`, `.gte`, `.lt` or `.lte` is a bound, compared as a number when the value is one, as a
 * time when it is an ISO 8601 instant, else as text.
 */
export const ATTRIBUTE_FILTER_OPS = ['eq', 'gt', 'gte', 'lt', 'lte'] as const;
export type AttributeFilterOp = (typeof ATTRIBUTE_FILTER_OPS)[number];

/** `name` or `name.<op>`. */
export const ATTRIBUTE_FILTER_KEY = /^[a-zA-Z][a-zA-Z0-9_]{0,63}(\.(gt|gte|lt|lte))?$/;
/** The listing's query parameters for them: `attr.` and a filter key. */
export const ATTRIBUTE_QUERY_KEY = /^attr\.[a-zA-Z][a-zA-Z0-9_]{0,63}(\.(gt|gte|lt|lte))?$/;
/** At most this many attribute conditions in one filter. */
export const MAX_ATTRIBUTE_FILTERS = 8;

export const AttributeFilterValue = text(1, 256);
export const AttributeFilters = z
  .record(z.string().regex(ATTRIBUTE_FILTER_KEY, 'an attribute filter key is <name> or <name>.<gt|gte|lt|lte>'), AttributeFilterValue)
  .refine((r) => Object.keys(r).length <= MAX_ATTRIBUTE_FILTERS, `at most ${MAX_ATTRIBUTE_FILTERS} attribute filters`);
export type AttributeFilters = z.infer<typeof AttributeFilters>;

/** One condition on one attribute. */
export interface AttributeCondition {
  name: string;
  op: AttributeFilterOp;
  value: string;
}

/** The conditions of a filter's `attributes` (keys as AttributeFilters takes them). */
export function attributeConditions(filters: Readonly<Record<string, string>>): AttributeCondition[] {
  return Object.entries(filters).map(([key, value]) => {
    const dot = key.indexOf('.');
    return dot < 0 ? { name: key, op: 'eq', value } : { name: key.slice(0, dot), op: key.slice(dot + 1) as AttributeFilterOp, value };
  });
}

/** The `attr.*` parameters of a query string, as AttributeFilters keys (the prefix taken off). */
export function attributeQuery(query: Readonly<Record<string, unknown>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(query)) if (ATTRIBUTE_QUERY_KEY.test(k) && typeof v === 'string') out[k.slice('attr.'.length)] = v;
  return out;
}

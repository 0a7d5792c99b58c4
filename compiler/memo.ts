/**
 * `compute` once per object. A session keeps the documents of unchanged definitions from one
 * compile to the next, so what is derived from a document (its artifact text, its lock shape) is
 * computed once per document rather than once per compile: a recompile costs what changed.
 * Documents are never mutated after they are built.
 */
export function memoByObject<K extends object, V>(compute: (key: K) => V): (key: K) => V {
  const cache = new WeakMap<K, V>();
  return (key) => {
    if (!cache.has(key)) cache.set(key, compute(key));
    return cache.get(key) as V;
  };
}

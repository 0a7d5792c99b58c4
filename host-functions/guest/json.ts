// AssemblyScript (compiled by asc, not tsc): small JSON helpers.
// Enough for steps that pass values through; a module that needs a full
// object model can bundle a JSON library of its choice.

/** `s` as a JSON string literal, quotes included. */
export function quoteJson(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += "\\\\";
    else if (c === 0x0a) out += "\\n";
    else if (c === 0x0d) out += "\\r";
    else if (c === 0x09) out += "\\t";
    else if (c < 0x20) out += "\\u" + (c + 0x10000).toString(16).substr(1);
    else out += String.fromCharCode(c);
  }
  return out + '"';
}

/**
 * The raw JSON text of a top-level field of the object `json`, or null when
 * `json` is not an object or has no such key. Does not validate `json`.
 * Example: `jsonField('{"a":{"b":1}}', "a")` is `'{"b":1}'`.
 */
export function jsonField(json: string, key: string): string | null {
  let i = skipSpace(json, 0);
  if (i >= json.length || json.charCodeAt(i) !== 0x7b) return null;
  i++;
  while (true) {
    i = skipSpace(json, i);
    if (i >= json.length || json.charCodeAt(i) !== 0x22) return null;
    const keyEnd = skipValue(json, i);
    const name = json.substring(i, keyEnd);
    i = skipSpace(json, keyEnd);
    if (i >= json.length || json.charCodeAt(i) !== 0x3a) return null;
    const start = skipSpace(json, i + 1);
    const end = skipValue(json, start);
    if (name === quoteJson(key)) return json.substring(start, end);
    i = skipSpace(json, end);
    if (i >= json.length || json.charCodeAt(i) !== 0x2c) return null;
    i++;
  }
}

/** True when a host call's response is `{"error":{…}}`, a permanent failure. */
export function isErrorResponse(responseJson: string): bool {
  return jsonField(responseJson, "error") !== null;
}

function skipSpace(s: string, i: i32): i32 {
  while (i < s.length) {
    const c = s.charCodeAt(i);
    if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) break;
    i++;
  }
  return i;
}

/** Index just past the JSON value that starts at `i`. */
function skipValue(s: string, i: i32): i32 {
  let depth = 0;
  while (i < s.length) {
    const c = s.charCodeAt(i);
    if (c === 0x22) {
      i++;
      while (i < s.length && s.charCodeAt(i) !== 0x22) i += s.charCodeAt(i) === 0x5c ? 2 : 1;
      i++;
      if (depth === 0) return i;
      continue;
    }
    if (c === 0x7b || c === 0x5b) depth++;
    else if (c === 0x7d || c === 0x5d) {
      if (depth === 0) return i;
      depth--;
      if (depth === 0) return i + 1;
    } else if (depth === 0 && (c === 0x2c || c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09)) {
      return i;
    }
    i++;
  }
  return i;
}

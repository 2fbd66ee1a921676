// Checks that a payload survives JSON unchanged: what goes in is what a handler gets back.

export interface JsonProblem {
  path: string;
  problem: string;
}

const UNSTORABLE = 'text with a NUL character (\\u0000) or a lone UTF-16 surrogate, which PostgreSQL JSON refuses';

/** Cheap first test (surrogate pairs are common: emoji), then the exact one only when needed. */
export function unstorableText(s: string): boolean {
  return /[\u0000\uD800-\uDFFF]/.test(s) && /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s);
}

/** Returns the first value JSON would drop, change or refuse, or null when the value is faithful. */
export function findJsonProblem(value: unknown): JsonProblem | null {
  const seen = new Set<object>();
  const walk = (v: unknown, path: string): JsonProblem | null => {
    switch (typeof v) {
      case 'string':
        return unstorableText(v) ? { path, problem: UNSTORABLE } : null;
      case 'boolean':
        return null;
      case 'number':
        return Number.isFinite(v) ? null : { path, problem: `${v} is not a finite number (JSON would store null)` };
      case 'undefined':
        return { path, problem: 'undefined (JSON would drop it); use null or leave the key out' };
      case 'bigint':
        return { path, problem: 'a BigInt (JSON cannot carry it); send it as a string' };
      case 'function':
        return { path, problem: 'a function' };
      case 'symbol':
        return { path, problem: 'a symbol' };
    }
    if (v === null) return null;
    const obj = v as object;
    if (seen.has(obj)) return { path, problem: 'a circular reference' };
    const proto = Object.getPrototypeOf(obj);
    if (Array.isArray(obj)) {
      seen.add(obj);
      for (let i = 0; i < obj.length; i++) {
        const p = walk(obj[i], `${path}[${i}]`);
        if (p) return p;
      }
      seen.delete(obj);
      return null;
    }
    if (proto !== Object.prototype && proto !== null) {
      const kind = obj instanceof Date ? 'a Date (JSON turns it into a string; pass date.toISOString())' : `an instance of ${proto?.constructor?.name ?? 'a class'} (only plain objects and arrays are stored)`;
      return { path, problem: kind };
    }
    seen.add(obj);
    for (const key of Object.keys(obj)) {
      if (unstorableText(key)) return { path, problem: `a key that is ${UNSTORABLE}` };
      const p = walk((obj as Record<string, unknown>)[key], path ? `${path}.${key}` : key);
      if (p) return p;
    }
    seen.delete(obj);
    return null;
  };
  return walk(value, '');
}

// Named prepared statements for rea's hot SQL on node-postgres: each connection parses and plans
// a statement once instead of on every event, claim and completion. Only rea's own statements
// are named; the application's SQL through tx.query stays unnamed, so the per-connection
// statement cache cannot grow without bound.
import { createHash } from 'node:crypto';
import type { Queryable } from '../../driver/types.js';

interface PgQueryable {
  query(config: { name?: string; text: string; values?: unknown[] } | string, values?: unknown[]): Promise<any>;
}

export function preparedQueryable(target: PgQueryable, statements: ReadonlySet<string>): Queryable {
  const names = new Map<string, string>();
  const nameFor = (text: string) => {
    let name = names.get(text);
    if (!name) {
      name = `rea_${createHash('sha1').update(text).digest('hex').slice(0, 24)}`;
      names.set(text, name);
    }
    return name;
  };
  return {
    query: (text: string, params?: unknown[]) =>
      params && statements.has(text)
        ? target.query({ name: nameFor(text), text, values: params })
        : target.query(text, params),
  } as Queryable;
}

export function statementSet(...groups: Record<string, unknown>[]): Set<string> {
  const set = new Set<string>();
  for (const group of groups) for (const v of Object.values(group)) if (typeof v === 'string') set.add(v);
  return set;
}

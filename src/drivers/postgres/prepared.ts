// Named prepared statements for rea's hot SQL on node-postgres: each connection parses and plans
// a statement once instead of on every event, claim and completion. Only rea's own statements
// are named; the application's SQL through tx.query stays unnamed, so the per-connection
// statement cache cannot grow without bound.
import { createHash } from 'node:crypto';
import { DatabaseError } from '../../core/errors.js';
import type { Queryable } from '../../driver/types.js';
import { withTimeout, type PgQueryable } from './deadline.js';

/**
 * Statement names by statement set (one set per driver): a transaction or a caller's client gets a
 * new queryable each time, and hashing every statement again on each (a record() on the caller's
 * client, a transactional handler's completion) cost a SHA-1 per statement.
 */
const namesBySet = new WeakMap<ReadonlySet<string>, Map<string, string>>();

/** `namedTimeoutMs`: the deadline of rea's own (named) statements where the target gives the rest none (see deadline.ts). */
export function preparedQueryable(target: PgQueryable, statements: ReadonlySet<string>, namedTimeoutMs = 0): Queryable {
  const names = namesBySet.get(statements) ?? new Map<string, string>();
  namesBySet.set(statements, names);
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
        ? target.query(withTimeout({ name: nameFor(text), text, values: params }, undefined, namedTimeoutMs)).catch(explainNamed)
        : target.query(text, params),
  } as Queryable;
}

/** The server's words when a statement prepared by name is not on the connection, or another of that name is. */
const PREPARED_MISSING = '26000';
const PREPARED_DUPLICATE = '42P05';

/**
 * A named statement that the server says is missing, or already there: node-postgres prepares each
 * on a connection once and remembers it, so the connection it talks to is not always the same
 * server session. That is a pooler in transaction mode, and every statement of rea's would keep
 * failing this way, some of them on every job, with the server's words only.
 */
function explainNamed(err: unknown): never {
  const code = (err as { code?: unknown } | null)?.code;
  if (code === PREPARED_MISSING || code === PREPARED_DUPLICATE) {
    throw new DatabaseError('pooler', 'rea\'s statements are prepared once per connection, and this connection is not always the same PostgreSQL session: '
      + 'a pooler in transaction mode sits between rea and PostgreSQL (PgBouncer before 1.21, or with max_prepared_statements = 0). '
      + `Set database.pooler: 'transaction', with database.listen (rea's CLI: --pooler transaction); the database said: ${(err as Error).message}`, { cause: err });
  }
  throw err;
}

export function statementSet(...groups: Record<string, unknown>[]): Set<string> {
  const set = new Set<string>();
  for (const group of groups) for (const v of Object.values(group)) if (typeof v === 'string') set.add(v);
  return set;
}

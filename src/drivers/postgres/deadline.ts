// A deadline on the statements sent on rea's connections. A server that goes away without closing
// its connections (a failover that moved its address, a network partition, a host that froze)
// leaves a statement waiting for its answer until TCP gives up, some 15 minutes on Linux, and the
// relay, the worker or the leader waiting with it: no event is delivered meanwhile. Past the
// deadline the connection is closed and the statement fails as the database unreachable, which the
// loops treat as transient: they retry on a new connection. The application's SQL in rea's
// transactions (tx.query) has it too, or it would hold its pool connection just as long.
// The admin API's statements have it too. Migrations, VACUUM and scripts do not: they take as long
// as the tables need.
import type pg from 'pg';
import { DatabaseError } from '../../core/errors.js';

/** How long a statement on rea's connections waits for its answer by default (database.queryTimeoutMs). */
export const QUERY_TIMEOUT_MS = 30_000;

/** node-postgres's error when a query's query_timeout ran out (the connection is left waiting for the answer). */
const READ_TIMEOUT = 'Query read timeout';

type QueryConfig = { text: string; values?: unknown[]; name?: string; query_timeout?: number };
export interface PgQueryable {
  query(config: QueryConfig | string, values?: unknown[]): Promise<any>;
}

/** The statement's deadline ran out: node-postgres's own error, or rea's for it. */
export function isDeadlineError(err: unknown): boolean {
  if (err instanceof DatabaseError) return isDeadlineError(err.cause);
  return err instanceof Error && err.message === READ_TIMEOUT;
}

/**
 * Close a client's socket at once. node-postgres leaves a connection whose query timed out
 * waiting for that answer, with every later query queued behind it, and ending it politely
 * (a Terminate message) waits on the same silent socket.
 */
export function dropConnection(client: pg.ClientBase, reason?: Error): void {
  (client as unknown as { connection?: { stream?: { destroy(err?: Error): void } } }).connection?.stream?.destroy(reason);
}

/** The error a statement past its deadline fails with (transient: DatabaseError 'unreachable'). */
export function deadlineError(where: string, ms: number, cause: unknown, after = ''): DatabaseError {
  return new DatabaseError('unreachable', `no answer from ${where} to a statement within ${ms} ms (database.queryTimeoutMs); `
    + `the connection was closed${after}`, { cause });
}

/** The query config with the deadline, for node-postgres (0: none). */
export function withTimeout(config: QueryConfig | string, values: unknown[] | undefined, ms: number): QueryConfig {
  const c = typeof config === 'string' ? { text: config, values } : config;
  return ms > 0 ? { ...c, query_timeout: ms } : c;
}

/** One statement on a connection rea holds outside the pool, within `ms`; past it, the connection is dropped (its error handler takes over). */
export async function queryWithin(c: pg.Client, text: string, ms: number): Promise<unknown> {
  try {
    return await c.query(withTimeout(text, undefined, ms));
  } catch (err) {
    if (isDeadlineError(err)) dropConnection(c);
    throw err;
  }
}

/**
 * Every statement sent through `target`, one of rea's pools, waits at most `ms` for its answer
 * (0: no deadline). The driver closes the connection when the pool gets it back (its 'release'
 * listener), so nothing else is sent on it.
 */
export function withDeadline(target: PgQueryable, ms: number, where: string): PgQueryable {
  if (ms <= 0) return target;
  return {
    query: (config, values) => target.query(withTimeout(config, values, ms)).catch((err: unknown) => {
      throw isDeadlineError(err) ? deadlineError(where, ms, err) : err;
    }),
  };
}

// What the pg and PGlite drivers share: schema quoting and the migration runner.
import { OptionsError, ReaError } from '../../core/errors.js';
import type { Queryable } from '../../driver/types.js';
import { migrationStatements as m } from './sql.js';
import { migrations } from './migrations/index.js';

const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export function quoteSchema(schema: string): string {
  if (!SCHEMA_NAME.test(schema)) {
    throw new OptionsError('schema', `'${schema}' is not a plain lower-case identifier (letters, digits, _; at most 63)`);
  }
  return `"${schema}"`;
}

/** Apply pending migrations inside one transaction that holds an advisory lock, so concurrent migrators queue. */
export async function runMigrations(q: Queryable, exec: (sql: string) => Promise<unknown>, schema: string): Promise<number[]> {
  const s = quoteSchema(schema);
  await q.query(m.lock, [schema]);
  await q.query(m.createSchema(s));
  await q.query(m.createTable(s));
  const { rows } = await q.query<{ version: number }>(m.applied(s));
  const done = new Set(rows.map((r) => r.version));
  const applied: number[] = [];
  for (const migration of migrations) {
    if (done.has(migration.version)) continue;
    try {
      await exec(migration.sql.replaceAll('{schema}', s));
    } catch (err) {
      throw new ReaError('ERR_MIGRATION', `migration ${migration.version} (${migration.name}) failed in schema ${schema}: ${(err as Error).message}`, { cause: err });
    }
    await q.query(m.insert(s), [migration.version, migration.name]);
    applied.push(migration.version);
  }
  return applied;
}

export function notifyChannel(schema: string): string {
  return `rea_${schema}`;
}

const TRANSIENT_CODES = new Set(['40001', '40P01', '53300', '53400', '55P03', '57014', '57P01', '57P02', '57P03', '58000', '58030']);
const TRANSIENT_NODE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH']);

/** Errors that say nothing about the row being processed: the connection or server is the problem. */
export function isTransientPostgresError(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const code = String((err as { code?: unknown }).code ?? '');
  if (code.startsWith('08') || TRANSIENT_CODES.has(code) || TRANSIENT_NODE_CODES.has(code)) return true;
  const message = String((err as { message?: unknown }).message ?? '');
  return /Connection terminated|connection timeout|Client has encountered a connection error|not queryable|PGlite is closed/i.test(message);
}

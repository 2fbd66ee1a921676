// What the pg and PGlite drivers share: schema quoting and the migration runner.
import { createHash } from 'node:crypto';
import { DatabaseError, OptionsError, ReaError } from '../../core/errors.js';
import type { MigrationStatus, Queryable } from '../../driver/types.js';
import { migrationStatements as m } from './sql.js';
import { migrations } from './migrations/index.js';

const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/** Throw unless `schema` is a plain lower-case identifier; `field` names where it came from. */
export function checkSchemaName(schema: string, field = 'schema'): void {
  if (!SCHEMA_NAME.test(schema)) {
    throw new OptionsError(field, `'${schema}' is not a plain lower-case identifier (letters, digits, _; at most 63)`);
  }
}

export function quoteSchema(schema: string): string {
  checkSchemaName(schema);
  return `"${schema}"`;
}

/** The newest migration this rea ships. */
export const LATEST_MIGRATION = Math.max(...migrations.map((mig) => mig.version));

type AppliedMigration = { version: number; breaking: boolean };

/**
 * Migrations applied to the schema that this rea does not ship: a newer rea migrated it (a
 * rolling deploy, a rollback). Most leave the tables usable by older code, which then runs and
 * is warned about it; a migration a later rea marks `breaking` (older code would corrupt or
 * misread what it changed) makes this one refuse, naming it. A rollback past one needs the newer
 * rea, or a restore.
 */
function newerMigrations(rows: AppliedMigration[], schema: string, where: string): number[] {
  const newer = rows.filter((r) => r.version > LATEST_MIGRATION);
  const breaking = newer.filter((r) => r.breaking).map((r) => r.version);
  if (breaking.length > 0) {
    throw new DatabaseError('too-new', `schema "${schema}" of ${where} has migration${breaking.length > 1 ? 's' : ''} ${breaking.join(', ')} of a newer rea, which older versions must not run against (this rea knows migrations up to ${LATEST_MIGRATION}): run a rea at least as new as the one that migrated it`);
  }
  return newer.map((r) => r.version);
}

/**
 * Apply pending migrations inside one transaction that holds an advisory lock, so concurrent
 * migrators queue. `newer`: migrations of a newer rea already there (see newerMigrations).
 */
export async function runMigrations(q: Queryable, exec: (sql: string) => Promise<unknown>, schema: string, where: string): Promise<{ applied: number[]; newer: number[] }> {
  const s = quoteSchema(schema);
  await q.query(m.lock, [schema]);
  await q.query(m.lockTimeout(MIGRATION_LOCK_TIMEOUT_MS));
  await q.query(m.createSchema(s));
  await q.query(m.createTable(s));
  const { rows } = await q.query<AppliedMigration>(m.applied(s));
  const newer = newerMigrations(rows, schema, where);
  const done = new Set(rows.map((r) => r.version));
  const applied: number[] = [];
  for (const migration of migrations) {
    if (done.has(migration.version)) continue;
    try {
      await exec(migration.sql.replaceAll('{schema}', s));
    } catch (err) {
      const failed = new ReaError('ERR_MIGRATION', `migration ${migration.version} (${migration.name}) failed in schema ${schema}: ${(err as Error).message}`, { cause: err });
      failedMigration.set(failed, `${migration.version} (${migration.name})`);
      throw failed;
    }
    await q.query(m.insert(s), [migration.version, migration.name]);
    applied.push(migration.version);
  }
  return { applied, newer };
}

/**
 * How long one statement of a migration waits for a lock on a table. An ALTER TABLE queued behind
 * a transaction that holds the table (a business transaction that recorded an event and has not
 * committed, one left idle in transaction) makes every later insert into it wait too: `rea migrate`
 * on a live database held every record() of the application up for as long as that transaction
 * lasted. The attempt gives up instead, and is tried again.
 */
export const MIGRATION_LOCK_TIMEOUT_MS = 1_000;
/** How long migrate() keeps trying when its migrations' locks are held, before it fails naming the holders. */
export const MIGRATION_LOCK_WAIT_MS = 60_000;

export interface MigrateOptions {
  /** Called before each new try after a lock wait timed out; `holders` describes who held the lock. */
  onLockWait?: (info: { migration: string; holders: string; retryInMs: number }) => void;
  /** How long to keep trying (default MIGRATION_LOCK_WAIT_MS). */
  lockWaitMs?: number;
}

/** The migration a lock wait timed out in (`version (name)`), or undefined for any other error. */
function lockTimedOut(err: unknown): string | undefined {
  const cause = (err as { cause?: unknown } | null)?.cause;
  if (!(err instanceof ReaError) || err.code !== 'ERR_MIGRATION' || (cause as { code?: unknown } | null)?.code !== '55P03') return undefined;
  return failedMigration.get(err);
}

/** The migration (`version (name)`) each ERR_MIGRATION thrown by runMigrations was applying. */
const failedMigration = new WeakMap<Error, string>();

/**
 * Run `attempt` (one migrating transaction) until it is not stopped by a lock wait, for at most
 * `lockWaitMs`; then throw ERR_MIGRATION naming the transactions that held the locks. Between
 * attempts the lock queue is empty, so the application's writes go on.
 */
export async function migrateRetryingLocks<R>(
  attempt: () => Promise<R>,
  holders: () => Promise<Array<{ pid: number; application_name: string; state: string; xact_seconds: number }>>,
  schema: string,
  options: MigrateOptions = {},
): Promise<R> {
  const waitMs = options.lockWaitMs ?? MIGRATION_LOCK_WAIT_MS;
  const started = Date.now();
  let delay = 250;
  for (let tries = 1; ; tries++) {
    try {
      return await attempt();
    } catch (err) {
      const migration = lockTimedOut(err);
      if (migration === undefined) throw err;
      const held = await holders().then(
        (rows) => rows.map((r) => `pid ${r.pid} (application '${r.application_name}', ${r.state}, in a transaction for ${r.xact_seconds} s)`).join(', ') || 'a transaction that has ended since',
        () => 'a transaction rea could not look up',
      );
      if (Date.now() - started + delay > waitMs) {
        throw new ReaError('ERR_MIGRATION', `migration ${migration} in schema ${schema} could not take its lock on rea's tables in ${Math.round((Date.now() - started) / 1000)} s (${tries} tries of ${MIGRATION_LOCK_TIMEOUT_MS / 1000} s each, so the application's writes were never held up longer): held by ${held}. Let that transaction end (or end it: select pg_terminate_backend(pid)), then migrate again`, { cause: err });
      }
      options.onLockWait?.({ migration, holders: held, retryInMs: delay });
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(5_000, delay * 2);
    }
  }
}

/**
 * Throw DatabaseError('not-migrated') unless every migration this rea ships is applied to the
 * schema: started on a schema that is missing or behind, the relay and workers would only log
 * "relation does not exist" on every poll. `where` describes the server without its password.
 * Returns the migrations of a newer rea found there (see newerMigrations).
 */
export async function checkMigrated(q: Queryable, schema: string, where: string): Promise<{ newer: number[] }> {
  const rows = await appliedMigrations(q, schema, where);
  const done = new Set(rows.map((r) => r.version));
  const missing = migrations.filter((mig) => !done.has(mig.version)).map((mig) => mig.version);
  if (missing.length > 0) {
    throw new DatabaseError('not-migrated', `schema "${schema}" of ${where} lacks rea's migration${missing.length > 1 ? 's' : ''} ${missing.join(', ')}: run the migrations first (rea migrate, or bus.migrate())`);
  }
  return { newer: newerMigrations(rows, schema, where) };
}

async function appliedMigrations(q: Queryable, schema: string, where: string): Promise<AppliedMigration[]> {
  try {
    return (await q.query<AppliedMigration>(m.applied(quoteSchema(schema)))).rows;
  } catch (err) {
    throw explainPostgresError(err, schema, where);
  }
}

/**
 * The schema's migrations against this rea's, without refusing anything: for reads that go on
 * whatever it says (rea status, rea migrate --dry-run). A database that cannot be used throws,
 * as checkMigrated does.
 */
export async function migrationStatus(q: Queryable, schema: string, where: string): Promise<MigrationStatus> {
  let rows: AppliedMigration[] = [];
  try {
    rows = await appliedMigrations(q, schema, where);
  } catch (err) {
    // No schema or no migrations table: nothing applied yet.
    if (!(err instanceof DatabaseError && err.kind === 'not-migrated')) throw err;
  }
  const done = new Set(rows.map((r) => r.version));
  const newer = rows.filter((r) => r.version > LATEST_MIGRATION);
  return {
    pending: migrations.filter((mig) => !done.has(mig.version)).map((mig) => ({ version: mig.version, name: mig.name })),
    newer: newer.map((r) => r.version),
    breaking: newer.filter((r) => r.breaking).map((r) => r.version),
    knownUpTo: LATEST_MIGRATION,
  };
}

/** PostgreSQL's longest channel name, in bytes (NAMEDATALEN - 1): pg_notify refuses a longer one, and LISTEN cuts it short. */
const MAX_CHANNEL_BYTES = 63;

/**
 * The wake-up channel of a schema: rea_<schema>. A schema of more than 59 bytes would make that
 * too long (every NOTIFY failed and nobody was ever woken), so its channel keeps the schema's
 * first 50 bytes and adds 8 hex digits of a hash of the whole name, to tell apart schemas that
 * begin alike. Shorter schemas keep rea_<schema>, which processes of older versions listen on.
 */
export function notifyChannel(schema: string): string {
  const plain = `rea_${schema}`;
  if (Buffer.byteLength(plain) <= MAX_CHANNEL_BYTES) return plain;
  let head = '';
  for (const ch of schema) {
    if (Buffer.byteLength(head + ch) > 50) break;
    head += ch;
  }
  return `rea_${head}_${createHash('sha256').update(schema).digest('hex').slice(0, 8)}`;
}

// Not 57014 (query_canceled): a statement_timeout cancels the same statement again when it is
// retried as it was, so a relay batch that hits it is tried row by row and a row that always
// does is poisoned, instead of stalling the relay.
const TRANSIENT_CODES = new Set(['40001', '40P01', '53300', '53400', '55P03', '57P01', '57P02', '57P03', '58000', '58030', '25P03', '57P05']);
const TRANSIENT_NODE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH']);

/**
 * Server codes that mean no usable connection: shutting down, crashed, starting up, full, or this
 * session ended by the server for sitting idle (in a transaction: 25P03; outside one: 57P05).
 */
const CONNECTION_CODES = new Set(['53300', '57P01', '57P02', '57P03', '25P03', '57P05']);

/** Errors that say nothing about the row being processed: the connection or server is the problem. */
export function isTransientPostgresError(err: unknown): boolean {
  // 'pooler': a misconfiguration that fails statements wherever they land, not a fault of an
  // event or a job's (the relay would otherwise poison the events it meets, one by one).
  if (err instanceof DatabaseError) return err.kind === 'unreachable' || err.kind === 'pooler';
  if (typeof err !== 'object' || err === null) return false;
  return isConnectionError(err) || TRANSIENT_CODES.has(String((err as { code?: unknown }).code ?? ''));
}

/** No connection to the server, or it was lost (not a deadlock or a cancelled statement). */
function isConnectionError(err: object): boolean {
  const code = String((err as { code?: unknown }).code ?? '');
  if (code.startsWith('08') || CONNECTION_CODES.has(code) || TRANSIENT_NODE_CODES.has(code)) return true;
  const message = String((err as { message?: unknown }).message ?? '');
  // 'timeout expired': node-postgres's own words when connect_timeout ran out.
  return /Connection terminated|connection timeout|Client has encountered a connection error|not queryable|PGlite is closed|^timeout expired$/i.test(message);
}

/**
 * Refuse a connection string node-postgres would misread. It resolves anything that is not a URL
 * against a default base, so `notaurl` becomes host "base" and fails later with a name the user
 * never wrote, and it connects a mysql:// or http:// URL as if it were PostgreSQL. The string
 * itself is never repeated: it may hold a password.
 */
export function checkConnectionString(url: string, field: string): void {
  const expected = 'expected postgres://user:password@host:port/database (or postgresql://)';
  if (url.startsWith('/')) return; // a Unix socket directory, as pg accepts it
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new OptionsError(field, `not a valid connection URL (${/^[a-z][a-z0-9+.-]*:\/\//i.test(url) ? 'a malformed host, port or character' : 'no scheme://'}); ${expected}`);
  }
  if (!['postgres:', 'postgresql:', 'socket:'].includes(parsed.protocol)) {
    throw new OptionsError(field, `a ${parsed.protocol}// URL is not PostgreSQL; ${expected}`);
  }
  // An '@' after the host: a password holding '/', '?' or '#' that was not percent-encoded, so
  // the URL's host is really the user name and the password sits in the database name, where a
  // message would show it (and pg would connect to the wrong host). Nothing is echoed here.
  if (`${parsed.pathname}${parsed.search}${parsed.hash}`.includes('@')) {
    throw new OptionsError(field, `an '@' after the host: percent-encode '/', '?', '#' and '@' in the user name and password (encodeURIComponent); ${expected}`);
  }
}

/** How long opening a connection may take when the connection string does not say (connect_timeout). */
export const CONNECT_TIMEOUT_MS = 10_000;
/** Idle time before TCP keepalive probes start when the connection string does not say (keepalives_idle). */
export const KEEPALIVE_IDLE_MS = 60_000;

/** What node-postgres needs to honour a connection string's socket settings. */
export interface SocketSettings {
  connectionTimeoutMillis: number;
  keepAlive: boolean;
  keepAliveInitialDelayMillis: number;
}

/**
 * The connection string's libpq socket parameters, which node-postgres reads only from its config
 * object and ignores in a URL: `connect_timeout` (seconds; 0 waits for ever, as libpq),
 * `keepalives` (0 turns TCP keepalive off) and `keepalives_idle` (seconds). rea's defaults differ
 * from libpq's, which waits for ever and leaves keepalive to the system (2 hours of silence before
 * the first probe): a server that accepts the connection and never answers must not hang a
 * worker for ever, and an idle LISTEN connection must survive NAT and load-balancer idle timeouts,
 * and be noticed when it dies, rather than leave wake-ups silently to the poll.
 */
export function socketSettings(url: string, field: string): SocketSettings {
  const settings = { connectionTimeoutMillis: CONNECT_TIMEOUT_MS, keepAlive: true, keepAliveInitialDelayMillis: KEEPALIVE_IDLE_MS };
  if (url.startsWith('/')) return settings;
  let params: URLSearchParams;
  try {
    params = new URL(url).searchParams;
  } catch {
    return settings; // checkConnectionString names what is wrong with it
  }
  const seconds = (name: string): number | undefined => {
    const raw = params.get(name);
    if (raw === null) return undefined;
    if (!/^\d+$/.test(raw.trim()) || Number(raw) > 2_147_483) throw new OptionsError(field, `${name} in the connection string takes whole seconds (0 to 2147483), not '${raw}'`);
    return Number(raw) * 1000;
  };
  settings.connectionTimeoutMillis = seconds('connect_timeout') ?? settings.connectionTimeoutMillis;
  const keepalives = params.get('keepalives');
  if (keepalives !== null) {
    if (keepalives !== '0' && keepalives !== '1') throw new OptionsError(field, `keepalives in the connection string is 1 or 0, not '${keepalives}'`);
    settings.keepAlive = keepalives === '1';
  }
  settings.keepAliveInitialDelayMillis = seconds('keepalives_idle') ?? settings.keepAliveInitialDelayMillis;
  return settings;
}

const REFUSED_CODES = new Set(['28P01', '28000', '3D000']);
const MISSING_RELATION = /^relation "([^"]+)" does not exist$/;
const MISSING_SCHEMA = /^schema "([^"]+)" does not exist$/;
// Node's codes for a server certificate that TLS verification refused (sslmode=verify-full, and
// node-postgres's require / prefer, which verify too).
const TLS_CERT_CODES = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID', 'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** Errors of rea's own statements run in the caller's transaction (see reaStatementFailed). */
const reaStatementErrors = new WeakSet<object>();

/**
 * Mark `err` as the failure of one of rea's own statements (the events insert of record()), and
 * return it. An undefined column or table there means the schema lacks a migration (a new app on
 * an old schema: column "span_id" of relation "events" does not exist), and explainPostgresError
 * says so; the same codes from the application's own statements in that transaction are its own.
 */
export function reaStatementFailed(err: unknown): unknown {
  if (typeof err === 'object' && err !== null) reaStatementErrors.add(err);
  return err;
}

// undefined_column, undefined_table.
const UNDEFINED_OBJECT_CODES = new Set(['42703', '42P01']);

/**
 * Name what went wrong when the database cannot be used at all: nothing answering, a refusal
 * (password, missing database), or rea's tables missing from the schema or behind on migrations.
 * `where` describes the server without its password. Any other error comes back as it was.
 */
export function explainPostgresError(err: unknown, schema: string, where: string): unknown {
  if (err instanceof ReaError || typeof err !== 'object' || err === null) return err;
  const code = String((err as { code?: unknown }).code ?? '');
  const message = String((err as { message?: unknown }).message ?? '');
  const reas = reaStatementErrors.has(err);
  if (code === '42P01' || code === '3F000') {
    // Only rea's own schema and tables: a missing application table (rea capture) is not this.
    const relation = MISSING_RELATION.exec(message)?.[1];
    const missingSchema = MISSING_SCHEMA.exec(message)?.[1];
    if (missingSchema === schema || relation?.startsWith(`${schema}.`) || relation?.startsWith(`"${schema}".`)) {
      return new DatabaseError('not-migrated', `rea's tables are not in schema "${schema}" of ${where}: run the migrations first (rea migrate, or bus.migrate()); the database said: ${message}`, { cause: err });
    }
    if (!reas) return err;
  }
  // One of rea's own statements met a column or table the schema lacks: behind this rea.
  if (reas && UNDEFINED_OBJECT_CODES.has(code)) {
    return new DatabaseError('not-migrated', `schema "${schema}" of ${where} lacks migrations of this rea (its statement failed: ${message}): run the migrations first (rea migrate, or bus.migrate())`, { cause: err });
  }
  if (REFUSED_CODES.has(code)) return new DatabaseError('refused', `${where} refused the connection: ${message}`, { cause: err });
  // insufficient_privilege: the role may connect, but not use that schema or table (the message names it).
  if (code === '42501') return new DatabaseError('refused', `${where} refused: ${message}`, { cause: err });
  // node-postgres's own words (no code) when the URL asks for SSL and the server answers it has none.
  if (/^The server does not support SSL connections$/.test(message)) {
    return new DatabaseError('refused', `${where} does not support SSL connections, and the connection string asks for SSL (sslmode): connect without sslmode (or with sslmode=disable), or enable SSL on the server`, { cause: err });
  }
  if (TLS_CERT_CODES.has(code)) {
    return new DatabaseError('refused', `${where}: its TLS certificate was not accepted (${code}: ${message}); give the CA with sslrootcert, or choose another sslmode`, { cause: err });
  }
  if (/^timeout expired$/.test(message)) {
    return new DatabaseError('unreachable', `cannot reach ${where}: no answer within the connect timeout (connect_timeout in the connection string, in seconds; ${CONNECT_TIMEOUT_MS / 1000} by default)`, { cause: err });
  }
  if (isConnectionError(err)) return new DatabaseError('unreachable', `cannot reach ${where}: ${message || code}`, { cause: err });
  return err;
}

/** host:port/database (user) of a connection string, with no password, for messages. */
export function describeConnection(url: string | undefined, fallback: { host?: string; port?: number; database?: string; user?: string } = {}): string {
  let host = fallback.host ?? 'localhost';
  let port = String(fallback.port ?? 5432);
  let database = fallback.database;
  let user = fallback.user;
  if (url && !url.startsWith('/')) {
    try {
      const u = new URL(url);
      host = u.hostname || host;
      port = u.port || port;
      // Never a name with an '@' in it: that would be a password the URL did not encode.
      const named = decodeURIComponent(u.pathname.slice(1));
      database = named && !u.pathname.includes('@') ? named : database;
      user = decodeURIComponent(u.username) || user;
    } catch {
      // checked when the driver was made; nothing better to say here
    }
  } else if (url) {
    host = url;
  }
  return `PostgreSQL at ${host}:${port}${database ? `/${database}` : ''}${user ? ` (user ${user})` : ''}`;
}

// Where the CLI finds its database: flags first, then environment variables. Everything is
// checked here, before a connection is opened, and errors name the flag (or variable) at fault.
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import { OptionsError } from '../core/errors.js';
import type { Bus, DatabaseOptions } from '../bus.js';
import type { EventSchemas } from '../core/events.js';
import { checkConnectionString, checkSchemaName, socketSettings } from '../drivers/postgres/common.js';
import { UsageError } from './usage-error.js';

export interface ConnectionFlags {
  databaseUrl?: string;
  pglite?: string;
  schema?: string;
  pooler?: string;
}

export function addConnectionFlags(cmd: Command): Command {
  return cmd
    .option('--database-url <url>', 'PostgreSQL connection string (env DATABASE_URL)')
    .option('--pglite <dir>', 'use an embedded PGlite data directory instead (env REA_PGLITE)')
    .option('--schema <name>', "schema holding rea's tables (env REA_SCHEMA, default rea)")
    .option('--pooler <mode>', "'transaction' when the URL goes through a pooler in transaction mode, e.g. PgBouncer (env REA_POOLER)");
}

/**
 * The database and schema the flags name. `create`: a PGlite directory may be new (migrate);
 * every other command needs one that already holds a database, so a mistyped path is an error
 * rather than a fresh, empty database.
 */
export function resolveConnection(flags: ConnectionFlags, options: { create?: boolean } = {}): { database: DatabaseOptions; schema: string } {
  if (flags.databaseUrl !== undefined && flags.pglite !== undefined) {
    throw new OptionsError('--pglite', 'give --database-url or --pglite, not both');
  }
  const schema = flags.schema ?? process.env.REA_SCHEMA ?? 'rea';
  checkSchemaName(schema, flags.schema !== undefined ? '--schema' : 'REA_SCHEMA');
  const url = flags.databaseUrl ?? (flags.pglite ? undefined : process.env.DATABASE_URL);
  const pooler = flags.pooler ?? (process.env.REA_POOLER || undefined);
  const poolerField = flags.pooler !== undefined ? '--pooler' : 'REA_POOLER';
  if (pooler !== undefined && pooler !== 'transaction') {
    throw new OptionsError(poolerField, `'transaction' is the one value (a pooler in session mode needs none), not '${pooler}'`);
  }
  if (url) {
    const field = flags.databaseUrl !== undefined ? '--database-url' : 'DATABASE_URL';
    checkConnectionString(url, field);
    // Its socket parameters (connect_timeout=abc) too, here: the driver names its option, database.postgres.
    socketSettings(url, field);
    // The CLI's buses never start, so they need no LISTEN (database.listen).
    return { database: { postgres: url, poolSize: 4, ...(pooler ? { pooler, listen: false } : {}) }, schema };
  }
  if (pooler !== undefined && flags.pooler !== undefined) throw new OptionsError('--pooler', 'only with --database-url (or DATABASE_URL): PGlite has no pooler');
  const dir = flags.pglite ?? process.env.REA_PGLITE;
  if (dir) {
    if (!options.create && !dir.startsWith('memory://') && !existsSync(join(dir, 'PG_VERSION'))) {
      const field = flags.pglite !== undefined ? '--pglite' : 'REA_PGLITE';
      // A file there is no database rea migrate could create: say what it is instead.
      const notADirectory = existsSync(dir) && !statSync(dir).isDirectory();
      throw new OptionsError(field, notADirectory
        ? `${dir} is a file, not a PGlite data directory: give the path of a directory`
        : `${dir} holds no PGlite database (rea migrate --pglite ${dir} creates one)`);
    }
    return { database: { pglite: dir }, schema };
  }
  throw new OptionsError('--database-url', 'no database given: pass --database-url URL (or set DATABASE_URL), or --pglite DIR');
}

/** Run fn on the bus; a database that is down, refuses or is not migrated comes out as a DatabaseError naming it. */
export async function onDatabase<T>(bus: Bus<EventSchemas>, fn: (bus: Bus<EventSchemas>) => Promise<T>): Promise<T> {
  try {
    return await fn(bus);
  } catch (err) {
    throw bus.driver.explainError(err);
  } finally {
    await bus.stop();
  }
}

/** A commander parser for a whole-number flag in [min, max] (commander names the flag in its error). */
export function wholeNumber(min: number, max = Number.MAX_SAFE_INTEGER): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`must be a whole number ${max === Number.MAX_SAFE_INTEGER ? `≥ ${min}` : `from ${min} to ${max}`}`);
    }
    return n;
  };
}

/** `raw` (a flag's text, or a number from code) as a whole number ≥ `min`, or an error naming `field` (badValue). */
export function checkWholeNumber(field: string, raw: string | number, min: number): number {
  const n = typeof raw === 'number' ? raw : /^\d+$/.test(raw.trim()) ? Number(raw) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min) throw badValue(field, `must be a whole number ≥ ${min}, got '${raw}'`);
  return n;
}

/** `raw` as a TCP port (0 picks a free one), or an error naming `field` (badValue). */
export function checkPort(field: string, raw: string | number): number {
  const n = typeof raw === 'number' ? raw : /^\d+$/.test(raw.trim()) ? Number(raw) : Number.NaN;
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw badValue(field, `must be a port number from 0 to 65535 (0 picks a free one), got '${raw}'`);
  return n;
}

/** A malformed value: a usage error when `field` is a flag (it came from the command line), else an OptionsError (an option in code). */
export function badValue(field: string, problem: string): OptionsError | UsageError {
  return field.startsWith('--') ? new UsageError(field, problem) : new OptionsError(field, problem);
}

// Where the CLI finds its database: flags first, then environment variables.
import type { Command } from 'commander';
import { OptionsError } from '../core/errors.js';
import type { DatabaseOptions } from '../bus.js';

export interface ConnectionFlags {
  databaseUrl?: string;
  pglite?: string;
  schema?: string;
}

export function addConnectionFlags(cmd: Command): Command {
  return cmd
    .option('--database-url <url>', 'PostgreSQL connection string (env DATABASE_URL)')
    .option('--pglite <dir>', 'use an embedded PGlite data directory instead (env REA_PGLITE)')
    .option('--schema <name>', "schema holding rea's tables (env REA_SCHEMA, default rea)");
}

export function resolveConnection(flags: ConnectionFlags): { database: DatabaseOptions; schema: string } {
  const schema = flags.schema ?? process.env.REA_SCHEMA ?? 'rea';
  const url = flags.databaseUrl ?? (flags.pglite ? undefined : process.env.DATABASE_URL);
  if (url) return { database: { postgres: url, poolSize: 4 }, schema };
  const dir = flags.pglite ?? process.env.REA_PGLITE;
  if (dir) return { database: { pglite: dir }, schema };
  throw new OptionsError('--database-url', 'no database given: pass --database-url URL (or set DATABASE_URL), or --pglite DIR');
}

/** A connection string with its password replaced, for messages. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable connection string)';
  }
}

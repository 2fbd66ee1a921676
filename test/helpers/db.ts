// Test databases: PGlite always (one instance per test file), PostgreSQL when reachable. Every
// test gets its own schema, so tests never depend on order. With REA_REQUIRE_SERVICES=1 an
// unreachable PostgreSQL fails the file instead of skipping it.
import { randomBytes } from 'node:crypto';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { afterAll, beforeAll, describe, onTestFinished } from 'vitest';
import { createBus, type Bus, type BusOptions, type DatabaseOptions, type EventCatalog, type EventSchemas } from '../../src/index.js';

export const PG_URL = process.env.REA_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const requireServices = process.env.REA_REQUIRE_SERVICES === '1';

export async function postgresReachable(url = PG_URL): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('select 1');
    return true;
  } catch (err) {
    if (requireServices) throw new Error(`PostgreSQL at ${url} is required (REA_REQUIRE_SERVICES=1) but unreachable: ${(err as Error).message}`);
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

export function freshSchema(prefix = 't'): string {
  return `${prefix}_${randomBytes(6).toString('hex')}`;
}

export interface Target {
  name: 'pglite' | 'postgres';
  available: boolean;
  database(): DatabaseOptions;
  /** Run SQL outside rea, as the application or an operator would. */
  query<R = any>(sql: string, params?: unknown[]): Promise<R[]>;
}

let sharedPGlite: PGlite | undefined;
let adminPool: pg.Pool | undefined;

function pglite(): PGlite {
  sharedPGlite ??= new PGlite();
  return sharedPGlite;
}

function admin(): pg.Pool {
  adminPool ??= new pg.Pool({ connectionString: PG_URL, max: 4 });
  return adminPool;
}

afterAll(async () => {
  await sharedPGlite?.close();
  await adminPool?.end();
  sharedPGlite = undefined;
  adminPool = undefined;
});

const pgUp = await postgresReachable();

export const pgliteTarget: Target = {
  name: 'pglite',
  available: true,
  database: () => ({ pglite: pglite() }),
  // Without parameters, allow several statements (as psql would).
  query: async (sql, params) => {
    if (params) return (await pglite().query<any>(sql, params)).rows;
    const results = await pglite().exec(sql);
    return (results.at(-1)?.rows ?? []) as any[];
  },
};

export const postgresTarget: Target = {
  name: 'postgres',
  available: pgUp,
  database: () => ({ postgres: PG_URL, poolSize: 6 }),
  query: async (sql, params) => (await admin().query(sql, params as unknown[])).rows,
};

export const targets: Target[] = [pgliteTarget, postgresTarget];

/**
 * describe.each(targets), with PGlite started in a hook of its block: starting it (compiling the
 * WASM, initdb) took ~5 s alone and up to ~17 s while CI ran other files beside it, which
 * counted against the first test's timeout rather than the hooks' (vitest.config.ts).
 */
export function describeTargets(title: string, fn: (target: Target) => void): void {
  describe.each(targets)(title, (target) => {
    if (target === pgliteTarget) beforeAll(() => pglite().waitReady);
    fn(target);
  });
}

/** A migrated bus on a fresh schema, stopped and dropped when the test ends. */
export async function testBus<S extends EventSchemas>(
  target: Target,
  events: EventCatalog<S>,
  options: Partial<Omit<BusOptions<S>, 'events'>> = {},
): Promise<Bus<S>> {
  const schema = options.schema ?? freshSchema();
  const bus = createBus({ database: target.database(), schema, ...options, events } as BusOptions<S>);
  await bus.migrate();
  onTestFinished(async () => {
    await bus.stop({ timeoutMs: 2000 });
    await target.query(`drop schema if exists "${schema}" cascade`);
  });
  return bus;
}

/** Fast retries for tests: 10 ms, no jitter. */
export const quickBackoff = () => 10;

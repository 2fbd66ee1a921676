// Shared plumbing for the harness: where the database is, fresh schemas, clocks and statistics.
// Everything talks to one real PostgreSQL database so every system sees the same server.
import pg from 'pg';

/** The harness's own database; overridable so the same code can run on another host. */
export const DATABASE_URL = process.env.REA_BENCH_URL ?? 'postgres://postgres@127.0.0.1:5432/rea_bench';

/** Wall-clock milliseconds with sub-millisecond resolution, comparable across processes on one host. */
export function nowMs(): number {
  return performance.timeOrigin + performance.now();
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Create the benchmark database if it is missing (connects to the maintenance db `postgres`). */
export async function ensureDatabase(): Promise<void> {
  const url = new URL(DATABASE_URL);
  const name = url.pathname.replace(/^\//, '');
  url.pathname = '/postgres';
  const c = new pg.Client({ connectionString: url.toString() });
  await c.connect();
  try {
    const { rowCount } = await c.query('select 1 from pg_database where datname = $1', [name]);
    if (!rowCount) await c.query(`create database "${name}"`);
  } finally {
    await c.end();
  }
}

let admin: pg.Pool | undefined;
/** A small pool for the harness's own bookkeeping (schema resets, counts); never used in a measured path. */
export function adminPool(): pg.Pool {
  admin ??= new pg.Pool({ connectionString: DATABASE_URL, max: 2, application_name: 'rea-bench-admin' });
  return admin;
}

export async function closeAdmin(): Promise<void> {
  await admin?.end();
  admin = undefined;
}

/** Drop a schema and everything in it; each system gets a fresh one per repetition. */
export async function dropSchema(schema: string): Promise<void> {
  await adminPool().query(`drop schema if exists "${schema}" cascade`);
}

/** `n` pg clients, already connected: the "8 connections" of the enqueue and physical figures. */
export async function connectClients(n: number, application_name = 'rea-bench'): Promise<pg.Client[]> {
  const clients = Array.from({ length: n }, () => new pg.Client({ connectionString: DATABASE_URL, application_name }));
  await Promise.all(clients.map((c) => c.connect()));
  return clients;
}

export async function endClients(clients: pg.Client[]): Promise<void> {
  await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
}

/**
 * Run `total` units of work spread over `clients.length` connections, each connection running
 * its share back to back; returns units per second over the whole wall time.
 */
export async function drive<C>(clients: C[], total: number, unit: (c: C, i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const t0 = nowMs();
  await Promise.all(
    clients.map(async (c) => {
      for (;;) {
        const i = next++;
        if (i >= total) return;
        await unit(c, i);
      }
    }),
  );
  return total / ((nowMs() - t0) / 1000);
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** Nearest-rank percentile (p in 0..100) of an unsorted sample. */
export function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const rank = Math.min(s.length, Math.max(1, Math.ceil((p / 100) * s.length)));
  return s[rank - 1]!;
}

export function round(x: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

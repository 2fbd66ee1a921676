// A real PgBouncer (Debian's package) in transaction mode in front of the test PostgreSQL, for the
// tests of database.pooler. One per test file, on a free port of its own, with one server
// connection per database, so that every client shares the one server session and what one
// client leaves there (a prepared statement, a LISTEN) the next one meets. Absent: its tests skip,
// or fail under REA_REQUIRE_SERVICES=1 (CI installs it).
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { PG_URL, requireServices } from './db.js';

export const PGBOUNCER = process.env.REA_PGBOUNCER ?? '/usr/sbin/pgbouncer';

export interface Bouncer {
  /** PG_URL, through PgBouncer. */
  url: string;
  /** The application_name of each client connected to PgBouncer now (its SHOW CLIENTS). */
  clientNames(): Promise<string[]>;
  stop(): Promise<void>;
}

export function pgbouncerAvailable(): boolean {
  if (existsSync(PGBOUNCER)) return true;
  if (requireServices) throw new Error(`PgBouncer is required (REA_REQUIRE_SERVICES=1) but ${PGBOUNCER} is missing: apt-get install pgbouncer`);
  return false;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** PgBouncer refuses to run as root: it then runs as the postgres user (Debian's server runs as it too). */
function runAs(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  return { uid: Number(execFileSync('id', ['-u', 'postgres']).toString()), gid: Number(execFileSync('id', ['-g', 'postgres']).toString()) };
}

export async function startPgbouncer(): Promise<Bouncer> {
  const upstream = new URL(PG_URL);
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'rea-pgbouncer-'));
  const user = runAs();
  writeFileSync(join(dir, 'users.txt'), `"${decodeURIComponent(upstream.username || 'postgres')}" ""\n`);
  writeFileSync(join(dir, 'pgbouncer.ini'), [
    '[databases]',
    `* = host=${upstream.hostname} port=${upstream.port || 5432}`,
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    'unix_socket_dir =',
    'auth_type = trust',
    `admin_users = ${decodeURIComponent(upstream.username || 'postgres')}`,
    `auth_file = ${join(dir, 'users.txt')}`,
    'pool_mode = transaction',
    'default_pool_size = 1',
    'max_client_conn = 100',
    // node-postgres sends it at start-up; PgBouncer does not track it.
    'ignore_startup_parameters = extra_float_digits',
    `logfile = ${join(dir, 'pgbouncer.log')}`,
    '',
  ].join('\n'));
  if (user) {
    chownSync(dir, user.uid, user.gid);
    for (const f of ['users.txt', 'pgbouncer.ini']) chownSync(join(dir, f), user.uid, user.gid);
  }
  chmodSync(dir, 0o700);
  const child: ChildProcess = spawn(PGBOUNCER, [join(dir, 'pgbouncer.ini')], { stdio: 'ignore', ...user });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // Up when it accepts a connection (a few ms).
  for (let i = 0; ; i++) {
    const up = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => { s.destroy(); resolve(true); });
      s.once('error', () => resolve(false));
    });
    if (up) break;
    if (child.exitCode !== null || i === 100) {
      child.kill('SIGKILL');
      throw new Error(`PgBouncer did not start on port ${port} (exit code ${child.exitCode}); see ${join(dir, 'pgbouncer.log')}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const url = new URL(PG_URL);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  const console = new URL(url);
  console.pathname = '/pgbouncer';
  return {
    url: url.toString(),
    clientNames: async () => {
      // The admin console speaks the simple protocol only: a query without parameters.
      const c = new pg.Client({ connectionString: console.toString() });
      await c.connect();
      try {
        return (await c.query('SHOW CLIENTS')).rows.filter((r) => r.database !== 'pgbouncer').map((r) => String(r.application_name ?? ''));
      } finally {
        await c.end();
      }
    },
    stop: async () => {
      child.kill('SIGINT');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

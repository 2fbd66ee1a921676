// The connections rea opens from a connection string: a server that accepts them and never answers
// is given up on after connect_timeout (node-postgres would wait for ever), and they keep TCP
// keepalive on, so an idle LISTEN connection survives NAT idle timeouts and a dead one is noticed.
import { readFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createBus, DatabaseError, defineEvents, OptionsError } from '../src/index.js';
import { CONNECT_TIMEOUT_MS, KEEPALIVE_IDLE_MS, socketSettings } from '../src/drivers/postgres/common.js';
import { freshSchema, PG_URL, postgresTarget, testBus } from './helpers/db.js';

const events = defineEvents({});
const SECRET = 'n0t-in-messages';

describe('connection settings', () => {
  const sockets: Socket[] = [];
  let silent: ReturnType<typeof createServer> | undefined;

  afterEach(async () => {
    for (const s of sockets.splice(0)) s.destroy();
    await new Promise<void>((resolve) => (silent ? silent.close(() => resolve()) : resolve()));
    silent = undefined;
  });

  /** A "database" that accepts connections and never says a word. */
  async function silentServer(): Promise<number> {
    silent = createServer((socket) => void sockets.push(socket));
    await new Promise<void>((resolve) => silent!.listen(0, '127.0.0.1', resolve));
    return (silent.address() as AddressInfo).port;
  }

  it('a server that never answers is given up on after connect_timeout, named, without the password', async () => {
    const port = await silentServer();
    const bus = createBus({ database: { postgres: `postgres://postgres:${SECRET}@127.0.0.1:${port}/shop?connect_timeout=1`, poolSize: 1 }, events });
    try {
      // Each used to wait for ever: node-postgres has no connect timeout unless given one, and
      // reads connect_timeout only from its config object, never from the URL.
      for (const call of [() => bus.migrate(), () => bus.start(), () => bus.overview()]) {
        const err = await call().then(() => null, (e: unknown) => e);
        expect(err).toBeInstanceOf(DatabaseError);
        expect(err).toMatchObject({ code: 'ERR_DATABASE', kind: 'unreachable' });
        expect((err as Error).message).toBe(`cannot reach PostgreSQL at 127.0.0.1:${port}/shop (user postgres): no answer within the connect timeout (connect_timeout in the connection string, in seconds; 10 by default)`);
        expect(bus.driver.isTransientError(err)).toBe(true);
      }
      expect(sockets.length).toBeGreaterThan(0); // it did connect, and got no answer
    } finally {
      await bus.stop();
    }
  });

  it.runIf(postgresTarget.available)("bus.transaction that cannot begin (no such database, nothing listening) rejects with rea's DatabaseError naming the server, not pg's error", async () => {
    // It was pg's own DatabaseError (code 3D000), a class of the same name as rea's that
    // instanceof ReaError did not know, or a bare ECONNREFUSED, where start() and migrate() said
    // the same thing in rea's words.
    const url = new URL(PG_URL);
    url.password = SECRET;
    url.pathname = `/no_such_db_${Date.now()}`;
    const closed = await silentServer();
    silent!.close();
    for (const [postgres, kind] of [[url.toString(), 'refused'], [`postgres://postgres:${SECRET}@127.0.0.1:${closed}/shop`, 'unreachable']] as const) {
      const bus = createBus({ database: { postgres, poolSize: 1 }, events });
      try {
        let ran = false;
        const err = await bus.transaction(async () => void (ran = true)).then(() => null, (e: unknown) => e);
        expect(ran).toBe(false);
        expect(err).toBeInstanceOf(DatabaseError);
        expect(err).toMatchObject({ code: 'ERR_DATABASE', kind });
        expect((err as Error).message).toMatch(/PostgreSQL at 127\.0\.0\.1:\d+\/\w+ \(user postgres\)/);
        expect((err as Error).message).not.toContain(SECRET);
      } finally {
        await bus.stop();
      }
    }
  });

  it('connect_timeout, keepalives and keepalives_idle come from the URL, with defaults that do not wait for ever', () => {
    expect(socketSettings('postgres://db.internal/shop', 'f')).toEqual({ connectionTimeoutMillis: CONNECT_TIMEOUT_MS, keepAlive: true, keepAliveInitialDelayMillis: KEEPALIVE_IDLE_MS });
    expect(CONNECT_TIMEOUT_MS).toBe(10_000);
    expect(socketSettings('postgres://db.internal/shop?connect_timeout=0&keepalives=0', 'f')).toMatchObject({ connectionTimeoutMillis: 0, keepAlive: false });
    expect(socketSettings('postgres://db.internal/shop?sslmode=require&keepalives_idle=30&connect_timeout=5', 'f'))
      .toEqual({ connectionTimeoutMillis: 5_000, keepAlive: true, keepAliveInitialDelayMillis: 30_000 });
    for (const [query, named] of [['connect_timeout=soon', 'connect_timeout'], ['connect_timeout=-1', 'connect_timeout'], ['keepalives=yes', 'keepalives'], ['keepalives_idle=1.5', 'keepalives_idle']]) {
      const err = (() => {
        try {
          createBus({ database: { postgres: `postgres://u:${SECRET}@db.internal/shop?${query}` }, events });
          return null;
        } catch (e) {
          return e;
        }
      })();
      expect(err).toBeInstanceOf(OptionsError);
      expect(err).toMatchObject({ field: 'database.postgres' });
      expect((err as Error).message).toContain(named);
      expect((err as Error).message).not.toContain(SECRET);
    }
  });

  it.runIf(process.platform === 'linux' && postgresTarget.available)('the pool and the LISTEN connection keep TCP keepalive on', async () => {
    // The kernel shows the keepalive timer only while no sent data waits for its ACK, so each
    // connection is looked at while nothing else uses it: a pool no relay or worker polls on (this
    // bus is not started), and a LISTEN connection of a process that records nothing.
    const quiet = await testBus(postgresTarget, defineEvents({}), { relay: { enabled: false }, worker: { enabled: false } });
    const poolPort = await quiet.transaction(async (tx: any) => Number((await tx.query('select inet_client_port() as port')).rows[0].port));
    const schema = freshSchema();
    const bus = await testBus(postgresTarget, defineEvents({ 'x.y': (await import('zod')).z.object({}) }), { schema });
    bus.on('x.y', 'h', async () => undefined);
    await bus.start();
    const listening = await postgresTarget.query<{ port: number }>(
      `select client_port as port from pg_stat_activity where application_name = 'rea-listen' and query like $1`, [`%rea_${schema}%`],
    );
    expect(listening).toHaveLength(1);
    for (const port of [poolPort, listening[0]!.port]) {
      expect({ port, timer: tcpTimer(port) }).toEqual({ port, timer: 'keepalive' });
    }
    expect(PG_URL).not.toContain('keepalives'); // the default, not the test's URL, turned it on
  });
});

/** The kernel's timer on the local TCP socket bound to `port` (/proc/net/tcp's "tr": 2 is keepalive). */
function tcpTimer(port: number): string {
  const hex = port.toString(16).toUpperCase().padStart(4, '0');
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of readFileSync(file, 'utf8').split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f[1]?.endsWith(`:${hex}`) && f[3] === '01') {
        const tr = f[5]!.split(':')[0];
        return tr === '02' ? 'keepalive' : tr === '00' ? 'none' : `timer ${tr}`;
      }
    }
  }
  return 'no such socket';
}

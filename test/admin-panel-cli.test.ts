// rea panel: refuses to serve half-configured (no token, or --no-auth on a reachable address),
// and serves the admin on loopback otherwise.
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { isLoopbackHost } from '../src/admin/auth.js';
import { startPanel } from '../src/cli/panel.js';
import { createBus, defineEvents } from '../src/index.js';
import { call, TOKEN } from './helpers/admin.js';
import { freshSchema, PG_URL, postgresTarget } from './helpers/db.js';

const base = { port: '0', host: '127.0.0.1', tokenEnv: 'REA_TEST_PANEL_TOKEN', pglite: 'memory://' };

describe('rea panel', () => {
  afterEach(() => {
    delete process.env.REA_TEST_PANEL_TOKEN;
  });

  it('refuses --no-auth on a non-loopback address and a missing token', async () => {
    await expect(startPanel({ ...base, host: '0.0.0.0', auth: false })).rejects.toThrow(/--no-auth only binds a loopback address/);
    await expect(startPanel({ ...base, host: '192.168.1.10', auth: false })).rejects.toMatchObject({ field: '--host' });
    await expect(startPanel({ ...base })).rejects.toMatchObject({ field: '--token-env' });
    // A malformed value is a usage error like the rest of the command line's (it was ERR_OPTIONS).
    await expect(startPanel({ ...base, port: 'x' })).rejects.toMatchObject({ code: 'ERR_USAGE', field: '--port' });
  });

  // A token from a secret file often ends in a newline: no Bearer header or login form can send
  // it, so every request was 401 'wrong credentials'. A short one was named auth.token, an
  // option the operator never set.
  it('a token with a trailing newline, or too short, is refused naming its variable, never echoing it', async () => {
    process.env.REA_TEST_PANEL_TOKEN = `${TOKEN}\n`;
    const err = await startPanel({ ...base }).then(() => null, (e: unknown) => e);
    expect(err).toMatchObject({ code: 'ERR_OPTIONS', field: 'REA_TEST_PANEL_TOKEN' });
    expect((err as Error).message).toMatch(/^invalid option REA_TEST_PANEL_TOKEN: holds whitespace \(a trailing newline/);
    expect((err as Error).message).not.toContain(TOKEN);
    process.env.REA_TEST_PANEL_TOKEN = 'short';
    await expect(startPanel({ ...base })).rejects.toMatchObject({ field: 'REA_TEST_PANEL_TOKEN', message: expect.stringMatching(/at least 16 characters/) });
  });

  it('a port already in use is a usage error naming the port and --port, not a bare EADDRINUSE', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as AddressInfo).port;
    try {
      const err = await startPanel({ ...base, port: String(port), auth: false }).then(() => null, (e: unknown) => e);
      expect(err).toMatchObject({ code: 'ERR_OPTIONS', field: '--port' });
      expect((err as Error).message).toBe(`invalid option --port: port ${port} on 127.0.0.1 is already in use; pick another with --port, or 0 for a free one`);
    } finally {
      await new Promise<void>((resolve) => taken.close(() => resolve()));
    }
  });

  it('a port in use is said at once, not after waiting for a database that does not answer', async () => {
    // A "database" that accepts connections and never answers: the panel waits up to 15 s for it
    // before serving, and the port error used to come only after that wait.
    const sockets: Socket[] = [];
    const silent = createServer((socket) => void sockets.push(socket));
    const taken = createServer();
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const dbPort = (silent.address() as AddressInfo).port;
    const port = (taken.address() as AddressInfo).port;
    try {
      const t0 = performance.now();
      const err = await startPanel({ port: String(port), host: '127.0.0.1', tokenEnv: 'REA_TEST_PANEL_TOKEN', auth: false, databaseUrl: `postgres://postgres@127.0.0.1:${dbPort}/x` })
        .then(() => null, (e: unknown) => e);
      expect(err).toMatchObject({ code: 'ERR_OPTIONS', field: '--port' });
      expect(performance.now() - t0).toBeLessThan(5_000);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => taken.close(() => resolve()));
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  it('serves the API with the token from the environment, and without auth on loopback', async () => {
    process.env.REA_TEST_PANEL_TOKEN = TOKEN;
    const panel = await startPanel({ ...base });
    try {
      expect((await call(panel.url, 'GET', '/api/overview')).status).toBe(401);
      // An unmigrated database answers, but has no lease to read.
      expect((await call(panel.url, 'GET', '/healthz')).json).toMatchObject({ status: 'unavailable', database: 'up', leader: 'unknown' });
    } finally {
      await panel.close();
    }
    const open = await startPanel({ ...base, auth: false });
    try {
      expect((await call(open.url, 'GET', '/login')).status).toBe(200);
    } finally {
      await open.close();
    }
  }, 60_000); // two embedded databases start, 2-5 s each, and more on a loaded machine

  it.skipIf(!postgresTarget.available)("its /metrics has the shared gauges, not the zero durations and delivery counts of a process that runs no handlers", async () => {
    // They read as "no failures" (rea_webhook_deliveries_total{outcome="failure"} 0) while the
    // workers of `rea run` failed: the panel counts only what its own process runs, which is nothing.
    const schema = freshSchema();
    process.env.REA_TEST_PANEL_TOKEN = TOKEN;
    await postgresTarget.query(`create schema "${schema}"`);
    const migrating = createBus({ database: { postgres: PG_URL, poolSize: 1 }, schema, events: defineEvents({}) });
    await migrating.migrate();
    await migrating.stop();
    const panel = await startPanel({ ...base, pglite: undefined, databaseUrl: PG_URL, schema });
    try {
      const metrics = await call(panel.url, 'GET', '/metrics', { headers: { authorization: `Bearer ${TOKEN}` } });
      expect(metrics.status).toBe(200);
      expect(metrics.text).toContain('rea_alert_active{alert="events_backlog"} 0');
      expect(metrics.text).not.toContain('rea_webhook_deliveries_total');
      expect(metrics.text).not.toContain('rea_handler_duration_seconds');
    } finally {
      await panel.close();
      await postgresTarget.query(`drop schema if exists "${schema}" cascade`);
    }
  });

  // Behind a proxy that passes its upstream's name as Host (nginx's default), the browser's Origin
  // is not the Host the panel sees, and rea panel had no way to say so: every button was a 403.
  it('--allowed-origin lets the origin a proxy serves the panel at post; a malformed one is a usage error', async () => {
    process.env.REA_TEST_PANEL_TOKEN = TOKEN;
    await expect(startPanel({ ...base, allowedOrigin: ['ops.example.com:443'] })).rejects.toMatchObject({ code: 'ERR_USAGE', field: '--allowed-origin' });
    const panel = await startPanel({ ...base, allowedOrigin: ['https://ops.example.com'] });
    try {
      const post = (origin: string) => call(panel.url, 'POST', '/api/events/requeue', { body: { poisoned: true }, headers: { authorization: `Bearer ${TOKEN}`, origin } });
      expect((await post('https://evil.example')).status).toBe(403);
      // Past the origin check: the unmigrated database answers 503.
      expect((await post('https://ops.example.com')).json.error.code).toBe('ERR_DATABASE');
    } finally {
      await panel.close();
    }
  }, 60_000);

  it('--no-auth serves on ::1, the IPv6 loopback its message lists (its last group is no port)', async () => {
    const open = await startPanel({ ...base, host: '::1', auth: false });
    try {
      expect(open.url).toMatch(/^http:\/\/\[::1\]:\d+\/$/);
      // Served, not refused as a remote peer (403): the unmigrated database is a 503.
      expect((await call(open.url, 'GET', '/api/overview')).json.error.code).toBe('ERR_DATABASE');
      expect((await call(open.url, 'GET', '/login')).status).toBe(200);
    } finally {
      await open.close();
    }
    // Other IPv6 addresses stay refused, and a bracketed Host header with its port is still read.
    await expect(startPanel({ ...base, host: '::', auth: false })).rejects.toMatchObject({ field: '--host' });
    await expect(startPanel({ ...base, host: 'fe80::1', auth: false })).rejects.toMatchObject({ field: '--host' });
    expect(isLoopbackHost('[::1]:8787')).toBe(true);
    expect(isLoopbackHost('localhost:8787')).toBe(true);
    expect(isLoopbackHost('evil.example:8787')).toBe(false);
  });

  it('every spelling of the IPv6 loopback is loopback, other addresses are not', () => {
    // The long form was refused: only the text '::1' was compared.
    for (const host of ['0:0:0:0:0:0:0:1', '[0:0:0:0:0:0:0:1]:8787', '0::1', '::ffff:127.0.0.1', '[::ffff:7f00:1]:8787', '127.0.0.2']) {
      expect({ host, loopback: isLoopbackHost(host) }).toEqual({ host, loopback: true });
    }
    for (const host of ['::2', '[0:0:0:0:0:0:0:2]:8787', '::', '::ffff:10.0.0.1', '128.0.0.1', 'fe80::1']) {
      expect({ host, loopback: isLoopbackHost(host) }).toEqual({ host, loopback: false });
    }
  });
});

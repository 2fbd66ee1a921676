// The admin HTTP API on node:http and Express: authentication (401s), cross-site refusal (403s),
// 400s naming the parameter, and every action's effect in the database, on PGlite and PostgreSQL.
import { randomBytes } from 'node:crypto';
import express from 'express';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { z } from 'zod';
import { AdminCredentialsMissingError, createAdminHandler, createBus, defineEvents, OptionsError, type Bus } from '../src/index.js';
import { checkHealth } from '../src/admin/health.js';
import type { AdminBus } from '../src/admin/route.js';
import { bearer, call, csrfFrom, login, serve, TOKEN } from './helpers/admin.js';
import { describeTargets, freshSchema, testBus, type Target } from './helpers/db.js';
import { rejectJobsFor } from './helpers/faults.js';
import { receiver } from './helpers/http.js';

const events = defineEvents({
  'order.created': z.object({ orderNo: z.string() }),
  'order.paid': z.object({ orderNo: z.string(), note: z.string().optional() }),
});
type TestBus = Bus<typeof events extends { schemas: infer S } ? S : never>;

async function setup(target: Target, opts: { start?: boolean; handlers?: boolean } = {}) {
  const bus = await testBus(target, events, { webhooks: { allowPrivateNetworks: true }, worker: { minPollMs: 1, maxPollMs: 50 } } as never) as unknown as TestBus;
  if (opts.handlers !== false) bus.on('order.*', 'mailer', () => {});
  if (opts.start) await bus.start();
  const handler = createAdminHandler(bus, { auth: { token: TOKEN } });
  const s = await serve(handler);
  return { bus, s, origin: s.url };
}

/** Poison an event for real: a trigger on the jobs table rejects jobs for order BOOM. */
async function poisonOne(target: Target, bus: TestBus): Promise<string> {
  const s = bus.schema;
  const undo = await rejectJobsFor(target, s);
  const poisoned = bus.lifecycle.waitFor('relay:event:poisoned');
  const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'BOOM' }));
  await poisoned;
  await undo();
  return id;
}

describe('createAdminHandler options', () => {
  it('takes a bus typed by its own event catalog, without a cast (checked by npm run typecheck)', () => {
    // Never called: only the types matter. Bus<S> is invariant in S (record, on), so a parameter
    // typed Bus<EventSchemas> refused every bus made with defineEvents({ … }).
    const typedBus = () => createBus({ database: { pglite: 'memory://' }, events });
    const mount = (bus: ReturnType<typeof typedBus>) => createAdminHandler(bus, { auth: 'none' });
    expect(typeof mount).toBe('function');
  });

  it('refuses to start without credentials unless auth is none', async () => {
    const bus = { overview: async () => ({}), lifecycle: { on: () => () => {} } } as never;
    const saved = process.env.REA_ADMIN_TOKEN;
    delete process.env.REA_ADMIN_TOKEN;
    try {
      expect(() => createAdminHandler(bus)).toThrow(AdminCredentialsMissingError);
      expect(() => createAdminHandler(bus, { auth: { token: 'short' } })).toThrow(/auth\.token/);
      expect(() => createAdminHandler(bus, { auth: { username: 'ops', password: 'x' } })).toThrow(/auth\.password/);
      expect(() => createAdminHandler(bus, { auth: 'none' })).not.toThrow();
      // No client can send a token's newline (a secret file's), so it could never be matched.
      expect(() => createAdminHandler(bus, { auth: { token: `${TOKEN}\n` } })).toThrow(/auth\.token: holds whitespace/);
      process.env.REA_ADMIN_TOKEN = `${TOKEN}\n`;
      expect(() => createAdminHandler(bus)).toThrow(/^invalid option REA_ADMIN_TOKEN: holds whitespace/);
      process.env.REA_ADMIN_TOKEN = 'short';
      expect(() => createAdminHandler(bus)).toThrow(/^invalid option REA_ADMIN_TOKEN: must be a string of at least 16/);
      process.env.REA_ADMIN_TOKEN = TOKEN;
      expect(() => createAdminHandler(bus)).not.toThrow();
      expect(() => createAdminHandler(bus, { basePath: 'admin' })).toThrow(/basePath/);
      // A misspelt option was dropped without a word: `basepath` left the mount path unstripped
      // (every request a 404), and a string 'false' (from an environment variable) left /healthz public.
      expect(() => createAdminHandler(bus, { basepath: '/admin' } as never))
        .toThrow(/^invalid option createAdminHandler\(options\): unknown option\(s\) basepath; known: auth, basePath/);
      expect(() => createAdminHandler(bus, { publicHealth: 'false' as never })).toThrow(new OptionsError('publicHealth', 'must be true or false, not "false"'));
      expect(() => createAdminHandler(bus, { publicHealth: false, basePath: '/admin', leaderGraceMs: 1000 })).not.toThrow();
      // A bare host threw a TypeError ('Invalid URL'); host:port parsed as a scheme whose origin
      // is 'null', which no request matches, so every panel action was refused as cross-site.
      for (const origin of ['ops.example.com', 'ops.example.com:443', 'https://ops.example.com/admin', 'ftp://ops.example.com']) {
        expect(() => createAdminHandler(bus, { allowedOrigins: [origin] }), origin).toThrow(/^invalid option allowedOrigins\[0\]: must be an origin such as/);
      }
      expect(() => createAdminHandler(bus, { allowedOrigins: ['https://ops.example.com/', 'http://10.0.0.5:8080'] })).not.toThrow();
      expect(() => createAdminHandler(bus, { leaderGraceMs: Number.NaN })).toThrow(/leaderGraceMs/);
      expect(() => createAdminHandler(bus, { refreshSeconds: '5' as never })).toThrow(/refreshSeconds/);
      // Each reload of an open overview runs its queries: 0.001 (or a delay past what a browser
      // timer holds, which then fires at once) reloaded it as fast as the browser could.
      for (const s of [0.001, 0.5, 2_147_484]) {
        expect(() => createAdminHandler(bus, { refreshSeconds: s }), String(s))
          .toThrow(new OptionsError('refreshSeconds', `must be from 1 to 2147483 seconds (each reload of an open overview runs its queries), or 0 for no auto-refresh, not ${s}`));
      }
      for (const s of [0, 1, 2.5, 2_147_483]) expect(() => createAdminHandler(bus, { refreshSeconds: s }), String(s)).not.toThrow();
    } finally {
      if (saved === undefined) delete process.env.REA_ADMIN_TOKEN;
      else process.env.REA_ADMIN_TOKEN = saved;
    }
  });
});

describe('checkHealth: the lease figures mean what their names say', () => {
  const at = (readAt: number, expiresAt: number) =>
    ({ driver: { admin: { healthRead: async () => ({ lease: { readAt: new Date(readAt), expiresAt: new Date(expiresAt) } }) } } }) as unknown as AdminBus;
  it('valid: no "expired ago", valid for the rest; expired: how long ago, not valid; past the grace: stale', async () => {
    expect(await checkHealth(at(1_000, 31_000), 30_000)).toEqual({ status: 'ok', database: 'up', leader: 'seen', leaderExpiredAgoMs: null, leaderValidForMs: 30_000 });
    expect(await checkHealth(at(11_000, 1_000), 30_000)).toEqual({ status: 'ok', database: 'up', leader: 'seen', leaderExpiredAgoMs: 10_000, leaderValidForMs: null });
    expect(await checkHealth(at(41_000, 1_000), 30_000)).toEqual({ status: 'unavailable', database: 'up', leader: 'stale', leaderExpiredAgoMs: 40_000, leaderValidForMs: null });
  });

  it('a Driver of its own without healthRead (written before it) still gets a health check: ping, then the lease', async () => {
    const own = (ping: () => Promise<void>) =>
      ({ driver: { admin: { ping, leaderGet: async () => ({ readAt: new Date(1_000), expiresAt: new Date(31_000) }) } } }) as unknown as AdminBus;
    expect(await checkHealth(own(async () => {}), 30_000)).toMatchObject({ status: 'ok', database: 'up', leader: 'seen' });
    expect(await checkHealth(own(() => new Promise(() => {})), 30_000, 50)).toMatchObject({ status: 'unavailable', database: 'down' });
  });
});

describe('admin API when the database cannot be used', () => {
  /** The admin of a bus whose PostgreSQL does not answer; what it logs is collected, not printed. */
  async function serveUnreachable() {
    const bus = createBus({
      database: { postgres: 'postgres://ops:s3cretpw@127.0.0.1:1/shop', poolSize: 1 },
      events,
      logger: { debug() {}, info() {}, warn() {}, error() {}, child() { return this; } },
    });
    onTestFinished(() => bus.stop());
    const logged: string[] = [];
    const spy = vi.spyOn(console, 'error').mockImplementation((...m: unknown[]) => void logged.push(m.map(String).join(' ')));
    onTestFinished(() => spy.mockRestore());
    return { s: await serve(createAdminHandler(bus, { auth: { token: TOKEN } })), logged };
  }

  it('answers 503 with what is wrong, never the server, user or password; the process log names it', async () => {
    const { s, logged } = await serveUnreachable();
    const r = await call(s.url, 'GET', '/api/overview', { headers: bearer(TOKEN) });
    expect(r.status).toBe(503);
    expect(r.json).toEqual({ error: { code: 'ERR_DATABASE', message: 'the database does not answer; try again shortly' } });
    expect(r.text).not.toMatch(/s3cretpw|127\.0\.0\.1:1|ops|shop/);
    expect(logged.join('\n')).toMatch(/rea admin: request failed: cannot reach PostgreSQL at 127\.0\.0\.1:1\/shop \(user ops\)/);
    expect(logged.join('\n')).not.toContain('s3cretpw');
  });

  // Every route but the overview passed the driver's raw error on: a 500 ERR_INTERNAL, and pg's
  // whole stack in the log for every request.
  it('every route, page and /metrics answers 503 ERR_DATABASE, logged as one line each', async () => {
    const { s, logged } = await serveUnreachable();
    await expectEvery503(s.url, DATABASE_ROUTES, 'the database does not answer; try again shortly');
    expect(logged.length).toBe(DATABASE_ROUTES.length + 2);
    for (const line of logged) {
      expect(line).toMatch(/^rea admin: request failed: cannot reach PostgreSQL at 127\.0\.0\.1:1\/shop/);
      expect(line).not.toMatch(/\n\s+at /);
    }
  });
});

/** One above the largest bigint (9223372036854775807): 19 digits, but no job id. */
const OVER_BIGINT = '9999999999999999999';

/** Routes that read or write the database, with a body for the POSTs. */
const DATABASE_ROUTES: [string, string, unknown?][] = [
  ['GET', '/api/events'],
  ['GET', '/api/events/00000000-0000-7000-8000-000000000000'],
  ['POST', '/api/events/requeue', { poisoned: true }],
  ['GET', '/api/jobs'],
  ['POST', '/api/jobs/retry', { ids: ['1'] }],
  ['POST', '/api/jobs/cancel', { ids: ['1'] }],
  ['GET', '/api/endpoints'],
  ['GET', '/api/endpoints/00000000-0000-7000-8000-000000000000'],
  ['GET', '/api/endpoints/00000000-0000-7000-8000-000000000000/attempts'],
  ['POST', '/api/deliveries/1/resend'],
  ['GET', '/metrics'],
];

/** Each route, and the /events and /jobs pages, answers 503 ERR_DATABASE with `message`. */
async function expectEvery503(url: string, routes: [string, string, unknown?][], message: string): Promise<void> {
  for (const [method, path, body] of routes) {
    const r = await call(url, method, path, { headers: bearer(TOKEN), ...(body ? { body } : {}) });
    expect(r.status, `${method} ${path}`).toBe(503);
    expect(r.json, `${method} ${path}`).toEqual({ error: { code: 'ERR_DATABASE', message } });
  }
  for (const path of ['/events', '/jobs']) {
    const r = await call(url, 'GET', path, { headers: bearer(TOKEN) });
    expect(r.status, path).toBe(503);
    expect(r.text).toContain(message.replace(/'/g, '&#39;'));
  }
}

describeTargets('admin API on $name when rea is not migrated', (target) => {
  it.skipIf(!target.available)('every route, page and /metrics answers 503 ERR_DATABASE saying to run the migrations', async () => {
    const bus = createBus({ database: target.database(), schema: freshSchema('nomig'), events, logger: { debug() {}, info() {}, warn() {}, error() {}, child() { return this; } } });
    onTestFinished(() => bus.stop());
    const spy = vi.spyOn(console, 'error').mockImplementation(() => {});
    onTestFinished(() => spy.mockRestore());
    const s = await serve(createAdminHandler(bus, { auth: { token: TOKEN } }));
    await expectEvery503(s.url, [['GET', '/api/overview'], ...DATABASE_ROUTES], "rea's tables are not in this schema yet: run the migrations");
  });
});

describeTargets('admin API on $name', (target) => {
  const test = it.skipIf(!target.available);

  // A completed job whose first attempt a worker's stop cut short showed that error under 'Last
  // error', as a failed job's is: it read like a failure.
  test('jobs and event pages: a completed job\'s error is named an earlier attempt\'s, plain; a failed job\'s stays its last error', async () => {
    const { bus, s } = await setup(target, { handlers: false });
    const q = `"${bus.schema}"`;
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'E-1' }));
    const entry = (message: string) => JSON.stringify([{ at: new Date().toISOString(), attempt: 1, name: 'Error', message }]);
    await target.query(`insert into ${q}.jobs (event_id, kind, target, state, attempt, max_attempts, lease_ms, finalized_at, errors) values
      ($1, 'handler', 'mailer', 'completed', 2, 5, 30000, now(), $2::jsonb), ($1, 'handler', 'ledger', 'discarded', 5, 5, 30000, now(), $3::jsonb)`,
      [eventId, entry('the worker stopped'), entry('SMTP 550')]);
    for (const path of ['/jobs', `/events/${eventId}`]) {
      const page = await call(s.url, 'GET', path, { headers: bearer() });
      expect(page.status).toBe(200);
      expect(page.text).toContain('<span class="earlier" title="the worker stopped">attempt 1, before it completed: the worker stopped</span>');
      expect(page.text).toContain('<code class="preview" title="SMTP 550">SMTP 550</code>');
      expect(page.text).not.toContain('<code class="preview" title="the worker stopped">');
    }
  });

  test('authentication: missing and wrong credentials are 401; bearer, basic and the session cookie work', async () => {
    const { s } = await setup(target);
    for (const path of ['/api/overview', '/api/events', '/api/jobs', '/api/endpoints', '/metrics', '/api/events/00000000-0000-7000-8000-000000000000']) {
      const r = await call(s.url, 'GET', path);
      expect(r.status, path).toBe(401);
      expect(r.json.error.code).toBe('ERR_UNAUTHORIZED');
      expect(r.headers['www-authenticate']).toContain('Bearer');
    }
    expect((await call(s.url, 'GET', '/api/overview', { headers: bearer('wrong-token-wrong-token') })).status).toBe(401);
    const basicWrong = `Basic ${Buffer.from('admin:nope').toString('base64')}`;
    expect((await call(s.url, 'GET', '/api/overview', { headers: { authorization: basicWrong } })).status).toBe(401);
    expect((await call(s.url, 'GET', '/api/overview', { headers: { authorization: 'Token abc' } })).status).toBe(401);
    expect((await call(s.url, 'GET', '/api/overview', { headers: bearer() })).status).toBe(200);
    const basic = `Basic ${Buffer.from(`admin:${TOKEN}`).toString('base64')}`;
    expect((await call(s.url, 'GET', '/api/overview', { headers: { authorization: basic } })).status).toBe(200);
    // A forged or expired-looking cookie is no session.
    expect((await call(s.url, 'GET', '/api/overview', { headers: { cookie: 'rea_admin_session=9999999999999.x.y' } })).status).toBe(401);
    // Pages send the unauthenticated to the login form instead.
    const page = await call(s.url, 'GET', '/events?state=poisoned');
    expect(page.status).toBe(303);
    expect(page.headers.location).toBe('/login?next=%2Fevents%3Fstate%3Dpoisoned');
  });

  test('login sets an HttpOnly SameSite=Strict session that never holds the token; pages never show it', async () => {
    const { s } = await setup(target);
    const wrong = await call(s.url, 'POST', '/login', { form: { token: 'nope' }, headers: { origin: s.url } });
    expect(wrong.status).toBe(303);
    expect(wrong.headers.location).toContain('failed=1');
    expect(wrong.headers['set-cookie']).toBeUndefined();
    const r = await call(s.url, 'POST', '/login', { form: { token: TOKEN, next: '/jobs' }, headers: { origin: s.url } });
    expect(r.status).toBe(303);
    expect(r.headers.location).toBe('/jobs');
    const setCookie = String(r.headers['set-cookie']);
    expect(setCookie).toMatch(/HttpOnly/);
    expect(setCookie).toMatch(/SameSite=Strict/);
    expect(setCookie).not.toContain(TOKEN);
    const cookie = setCookie.split(';')[0]!;
    for (const path of ['/', '/events', '/jobs', '/endpoints', '/login']) {
      const page = await call(s.url, 'GET', path, { headers: { cookie } });
      expect(page.status, path).toBe(200);
      expect(page.text).not.toContain(TOKEN);
      expect(page.headers['content-security-policy']).toMatch(/script-src 'nonce-[^']+'/);
      expect(page.headers['content-security-policy']).not.toContain('unsafe-inline');
    }
    // An open redirect through next= is refused.
    const evil = await call(s.url, 'POST', '/login', { form: { token: TOKEN, next: '//evil.example/' }, headers: { origin: s.url } });
    expect(evil.headers.location).toBe('/');
    // A cross-site login post is refused.
    expect((await call(s.url, 'POST', '/login', { form: { token: TOKEN }, headers: { origin: 'https://evil.example' } })).status).toBe(403);
  });

  // Logout only cleared the cookie in the browser that clicked it: the session is a signed value
  // valid for 12 h, so a copy of the cookie (stolen, or left in another browser) went on working
  // until then, on every process serving the panel.
  test('logout ends the session: a copy of its cookie is refused afterwards, by every process on the database; other sessions and new logins work', async () => {
    const { bus, s } = await setup(target);
    // Another process serving the panel on the same database, with the same credentials.
    const otherBus = createBus({ database: target.database(), schema: bus.schema, events });
    onTestFinished(() => otherBus.stop());
    const other = await serve(createAdminHandler(otherBus, { auth: { token: TOKEN } }));
    const cookie = await login(s.url);
    const kept = await login(s.url);
    for (const url of [s.url, other.url]) expect((await call(url, 'GET', '/jobs', { headers: { cookie } })).status).toBe(200);
    const csrf = csrfFrom((await call(s.url, 'GET', '/', { headers: { cookie } })).text);

    const out = await call(s.url, 'POST', '/logout', { form: { _csrf: csrf }, headers: { cookie, origin: s.url } });
    expect(out.status).toBe(303);
    expect(out.headers.location).toBe('/login');
    expect(String(out.headers['set-cookie'])).toMatch(/^rea_admin_session=; .*Max-Age=0/);

    for (const url of [s.url, other.url]) {
      const page = await call(url, 'GET', '/jobs', { headers: { cookie } });
      expect(page.status, url).toBe(303);
      expect(page.headers.location).toBe('/login?next=%2Fjobs');
      expect((await call(url, 'GET', '/api/overview', { headers: { cookie } })).status, url).toBe(401);
      expect((await call(url, 'POST', '/api/events/requeue', { form: { poisoned: 'true', _csrf: csrf }, headers: { cookie, origin: url } })).status, url).toBe(401);
      // The login page still answers to it, as to no session.
      expect((await call(url, 'GET', '/login', { headers: { cookie } })).status).toBe(200);
    }
    // Only that session: another one goes on, and logging in again works.
    expect((await call(other.url, 'GET', '/jobs', { headers: { cookie: kept } })).status).toBe(200);
    const again = await login(s.url);
    expect(again).not.toBe(cookie);
    expect((await call(other.url, 'GET', '/', { headers: { cookie: again } })).status).toBe(200);

    // What the database keeps: a hash of the session until it would have expired, never the cookie.
    const value = decodeURIComponent(cookie.slice(cookie.indexOf('=') + 1));
    const rows = await target.query<{ id: string; expires_at: Date }>(`select id, expires_at from "${bus.schema}".admin_sessions_ended`);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.id).not.toContain(value.split('.')[1]);
    expect(rows[0]!.expires_at.getTime()).toBe(Number(value.split('.')[0]));
    // Each logout forgets the sessions that have expired since: the table holds at most 12 h of logouts.
    await target.query(`insert into "${bus.schema}".admin_sessions_ended (id, expires_at) values ('expired-session', now() - interval '1 second')`);
    const keptCsrf = csrfFrom((await call(s.url, 'GET', '/', { headers: { cookie: kept } })).text);
    expect((await call(other.url, 'POST', '/logout', { form: { _csrf: keptCsrf }, headers: { cookie: kept, origin: other.url } })).status).toBe(303);
    expect((await call(s.url, 'GET', '/jobs', { headers: { cookie: kept } })).status).toBe(303);
    const left = await target.query<{ id: string }>(`select id from "${bus.schema}".admin_sessions_ended order by id`);
    expect(left.map((r) => r.id)).not.toContain('expired-session');
    expect(left).toHaveLength(2);

    // A logout the database cannot record says so, and leaves the cookie to try again.
    const third = await login(s.url);
    const thirdCsrf = csrfFrom((await call(s.url, 'GET', '/', { headers: { cookie: third } })).text);
    const spy = vi.spyOn(console, 'error').mockImplementation(() => {});
    onTestFinished(() => spy.mockRestore());
    await target.query(`alter table "${bus.schema}".admin_sessions_ended rename to sessions_away`);
    const failed = await call(s.url, 'POST', '/logout', { form: { _csrf: thirdCsrf }, headers: { cookie: third, origin: s.url } });
    await target.query(`alter table "${bus.schema}".sessions_away rename to admin_sessions_ended`);
    expect(failed.status).toBe(503);
    expect(failed.headers['set-cookie']).toBeUndefined();
    expect((await call(s.url, 'POST', '/logout', { form: { _csrf: thirdCsrf }, headers: { cookie: third, origin: s.url } })).status).toBe(303);
    expect((await call(other.url, 'GET', '/jobs', { headers: { cookie: third } })).status).toBe(303);
  });

  // A raw non-ASCII character is no valid Location header: Node threw ERR_INVALID_CHAR, and the
  // login (or the form) answered 500. Dot segments are read by the browser: '/.//evil.example'
  // is '//evil.example', another host, once a notice is added to it.
  test('next and _return come back as a local, percent-encoded Location: never a 500, never another host', async () => {
    const { s } = await setup(target);
    const origin = s.url;
    const loginTo = async (next: string) => (await call(s.url, 'POST', '/login', { form: { token: TOKEN, next }, headers: { origin } }));
    const cases: [string, string][] = [
      ['/events?subject=müller', '/events?subject=m%C3%BCller'],
      ['/日本', '/%E6%97%A5%E6%9C%AC'],
      ['/.//evil.example/x', '/'],
      ['/a/..//evil.example', '/'],
      ['/\\evil.example', '/'],
    ];
    for (const [next, location] of cases) {
      const r = await loginTo(next);
      expect(r.status, next).toBe(303);
      expect(r.headers.location, next).toBe(location);
    }
    // The login page carries next on, as the form will post it.
    const page = await call(s.url, 'GET', `/login?next=${encodeURIComponent('/jobs?handler=café')}`);
    expect(page.text).toContain('name="next" value="/jobs?handler=caf%C3%A9"');

    const cookie = await login(s.url);
    const csrf = csrfFrom((await call(s.url, 'GET', '/', { headers: { cookie } })).text);
    const back = async (_return: string) => (await call(s.url, 'POST', '/api/events/requeue', { form: { poisoned: 'true', _csrf: csrf, _return }, headers: { cookie, origin } }));
    const encoded = await back('/jobs?handler=日');
    expect(encoded.status).toBe(303);
    expect(encoded.headers.location).toMatch(/^\/jobs\?handler=%E6%97%A5&notice=Requeued/);
    const dotted = await back('/.//evil.example');
    expect(dotted.status).toBe(303);
    expect(dotted.headers.location).toMatch(/^\/\?notice=Requeued/);
  });

  test('a cookie that is not valid percent-encoding is skipped: it neither breaks a request nor hides the session', async () => {
    const { s } = await setup(target);
    // Another application on the same host may set any cookie; decodeURIComponent threw on this
    // one, and every admin request, /login and /healthz included, was a 500.
    const bad = 'other_app=%E0%A4%A; broken=100%';
    expect((await call(s.url, 'GET', '/login', { headers: { cookie: bad } })).status).toBe(200);
    expect((await call(s.url, 'GET', '/healthz', { headers: { cookie: bad } })).status).toBe(503); // no leader yet, but an answer
    expect((await call(s.url, 'GET', '/api/overview', { headers: { cookie: bad, ...bearer() } })).status).toBe(200);
    expect((await call(s.url, 'GET', '/api/overview', { headers: { cookie: bad } })).status).toBe(401);
    const session = await login(s.url);
    expect((await call(s.url, 'GET', '/jobs', { headers: { cookie: `${bad}; ${session}` } })).status).toBe(200);
    expect((await call(s.url, 'GET', '/jobs', { headers: { cookie: `${session}; ${bad}` } })).status).toBe(200);
  });

  test('state-changing requests: cross-site is 403, a session needs same origin and the CSRF token', async () => {
    const { bus, s } = await setup(target);
    const cookie = await login(s.url);
    const page = await call(s.url, 'GET', '/', { headers: { cookie } });
    const csrf = csrfFrom(page.text);
    const path = '/api/events/requeue';
    const body = { poisoned: true };
    // Cross-site, whatever the credentials.
    expect((await call(s.url, 'POST', path, { body, headers: { ...bearer(), origin: 'https://evil.example' } })).status).toBe(403);
    expect((await call(s.url, 'POST', path, { form: { poisoned: 'true', _csrf: csrf }, headers: { cookie, origin: 'https://evil.example' } })).status).toBe(403);
    expect((await call(s.url, 'POST', path, { form: { poisoned: 'true', _csrf: csrf }, headers: { cookie, referer: 'https://evil.example/x' } })).status).toBe(403);
    // A session without Origin/Referer, or without the right token.
    expect((await call(s.url, 'POST', path, { form: { poisoned: 'true', _csrf: csrf }, headers: { cookie } })).status).toBe(403);
    expect((await call(s.url, 'POST', path, { form: { poisoned: 'true' }, headers: { cookie, origin: s.url } })).status).toBe(403);
    expect((await call(s.url, 'POST', path, { form: { poisoned: 'true', _csrf: 'forged' }, headers: { cookie, origin: s.url } })).status).toBe(403);
    // No credentials at all.
    expect((await call(s.url, 'POST', path, { body, headers: { origin: s.url } })).status).toBe(401);
    // Same origin with the token: done (a form gets a redirect back, JSON gets JSON).
    const ok = await call(s.url, 'POST', path, { form: { poisoned: 'true', _csrf: csrf, _return: '/events' }, headers: { cookie, origin: s.url } });
    expect(ok.status).toBe(303);
    expect(ok.headers.location).toMatch(/^\/events\?notice=Requeued/);
    const viaHeader = await call(s.url, 'POST', path, { body, headers: { cookie, referer: `${s.url}/`, 'x-csrf-token': csrf } });
    expect(viaHeader.status).toBe(200);
    // A script of the page may carry the token in its JSON body: it passed the check, then the
    // route refused it as an unknown parameter (400 _csrf).
    const inJson = await call(s.url, 'POST', path, { body: { ...body, _csrf: csrf }, headers: { cookie, origin: s.url } });
    expect(inJson.status, inJson.text).toBe(200);
    expect((await call(s.url, 'POST', path, { body: { ...body, _csrf: 'forged' }, headers: { cookie, origin: s.url } })).status).toBe(403);
    // Bearer clients (curl, scripts) send no Origin and need no CSRF token.
    expect((await call(s.url, 'POST', path, { body, headers: bearer() })).status).toBe(200);
    void bus;
  });

  test('bad filters and bodies are 400 naming the parameter', async () => {
    const { s } = await setup(target);
    const cases: [string, string, string, unknown?][] = [
      ['GET', '/api/events?state=done', 'state'],
      ['GET', '/api/events?limit=abc', 'limit'],
      ['GET', '/api/events?limit=0', 'limit'],
      ['GET', '/api/events?cursor=not-an-id', 'cursor'],
      ['GET', '/api/events?since=yesterday', 'since'],
      ['GET', '/api/events?type=a%20b', 'type'],
      ['GET', '/api/events?since=2025-02-01T00:00:00Z&until=2025-01-01T00:00:00Z', 'until'],
      // A day the month does not have was rolled over into the next month by Date.parse.
      ['GET', '/api/events?since=2025-02-30T00:00:00Z', 'since'],
      ['GET', '/api/events?until=2025-06-31', 'until'],
      ['GET', '/api/events?stat=poisoned', 'stat'],
      // The second value was dropped: the answer looked like the list of both.
      ['GET', '/api/events?state=poisoned&state=unfanned', 'state'],
      ['GET', '/api/jobs?handler=mailer&handler=ledger', 'handler'],
      ['GET', '/api/endpoints?state=failing&state=disabled', 'state'],
      ['GET', '/api/events/123', 'id'],
      ['GET', '/api/jobs?state=finished', 'state'],
      ['GET', '/api/jobs?kind=email', 'kind'],
      // No job has kind forward (forwarding is not built): refused, not an empty list.
      ['GET', '/api/jobs?kind=forward', 'kind'],
      ['GET', '/api/jobs?eventId=x', 'eventId'],
      ['GET', '/api/jobs?cursor=-4', 'cursor'],
      // 19 digits above the bigint range passed a digits-only check, then failed in the database (a 500).
      ['GET', `/api/jobs?cursor=${OVER_BIGINT}`, 'cursor'],
      ['POST', '/api/jobs/retry', 'ids', { ids: [OVER_BIGINT] }],
      ['POST', '/api/jobs/cancel', 'ids', { ids: ['1', OVER_BIGINT] }],
      ['POST', '/api/jobs/discard', 'ids', { ids: [OVER_BIGINT] }],
      ['POST', `/api/deliveries/${OVER_BIGINT}/resend`, 'id'],
      ['GET', `/api/endpoints/00000000-0000-7000-8000-000000000000/attempts?cursor=${OVER_BIGINT}`, 'cursor'],
      ['POST', '/api/jobs/retry', 'ids', { ids: ['abc'] }],
      ['POST', '/api/jobs/retry', 'ids', {}],
      ['POST', '/api/jobs/cancel', 'ids', {}],
      ['POST', '/api/jobs/discard', 'ids', { ids: [] }],
      ['POST', '/api/events/requeue', 'ids', { ids: ['nope'] }],
      ['POST', '/api/events/requeue', 'ids', {}],
      ['POST', '/api/endpoints', 'url', { eventTypes: ['order.*'] }],
      ['POST', '/api/endpoints', 'eventTypes', { url: 'http://127.0.0.1:9/x', eventTypes: [] }],
      // The bus's own check named its call (endpoints.create.eventTypes[1]), not the parameter.
      ['POST', '/api/endpoints', 'eventTypes', { url: 'https://hooks.example.com/in', eventTypes: ['order.*', 'a b'] }],
      ['GET', '/api/endpoints?state=sleepy', 'state'],
      // Neither, or both: where to send it is the body's to say.
      ['POST', '/api/events/00000000-0000-7000-8000-000000000000/replay', 'body', {}],
      ['POST', '/api/events/00000000-0000-7000-8000-000000000000/replay', 'body', { handler: 'ledger', endpointId: '00000000-0000-7000-8000-000000000000' }],
      ['POST', '/api/events/00000000-0000-7000-8000-000000000000/replay', 'endpointId', { endpointId: 'x' }],
      ['POST', '/api/events/00000000-0000-7000-8000-000000000000/replay', 'handler', { handler: '' }],
    ];
    for (const [method, path, parameter, body] of cases) {
      const r = await call(s.url, method, path, { headers: bearer(), body: body ?? (method === 'POST' ? {} : undefined) });
      expect(r.status, `${method} ${path}`).toBe(400);
      expect(r.json.error.parameter, `${method} ${path}`).toBe(parameter);
      expect(r.json.error.message).toContain(parameter);
    }
    // The largest bigint itself is a job id: an empty page, not a refusal.
    const last = await call(s.url, 'GET', '/api/jobs?cursor=9223372036854775807', { headers: bearer() });
    expect(last.status).toBe(200);
    expect(last.json.jobs).toEqual([]);
    const notJson = await call(s.url, 'POST', '/api/jobs/cancel', { headers: { ...bearer(), 'content-type': 'application/json' }, form: { x: '{' } as never });
    expect(notJson.status).toBe(400);
    expect((await call(s.url, 'GET', '/api/nothing-here', { headers: bearer() })).status).toBe(404);
    expect((await call(s.url, 'DELETE', '/api/events', { headers: bearer() })).status).toBe(405);
    // The panel shows the same refusal on the page (400), naming the parameter.
    const page = await call(s.url, 'GET', '/events?state=done', { headers: { cookie: await login(s.url) } });
    expect(page.status).toBe(400);
    expect(page.text).toContain('invalid parameter state');
  });

  test("the event page names a failed job's error class as the CLI does: 'TypeError: bad', but a plain Error's message alone", async () => {
    const { bus, s } = await setup(target, { handlers: false });
    bus.on('order.created', 'smtp', () => {
      throw new Error('SMTP 550 mailbox gone');
    }, { maxAttempts: 1 });
    bus.on('order.created', 'parse', () => {
      throw new TypeError('bad input');
    }, { maxAttempts: 1 });
    let discarded = 0;
    const both = new Promise<void>((resolve) => bus.lifecycle.on('job:discarded', () => void (++discarded === 2 && resolve())));
    await bus.start();
    const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'P1' }));
    await both;
    const page = await call(s.url, 'GET', `/events/${id}`, { headers: { cookie: await login(s.url) } });
    expect(page.status).toBe(200);
    expect(page.text).toContain('<code>TypeError: bad input</code>');
    expect(page.text).toContain('<code>SMTP 550 mailbox gone</code>');
    // Before: 'Error: SMTP 550 mailbox gone', where rea's CLI prints the message alone.
    expect(page.text).not.toContain('Error: SMTP 550');
  });

  test('a subject or trace id longer than 500 characters is found by its filter, as the panel links it (it was a 400)', async () => {
    const { bus, s } = await setup(target);
    const subject = `customer:${'c'.repeat(600)}`;
    const traceId = `batch-${'t'.repeat(700)}`;
    const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'L1' }, { subject, traceId }));
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'L2' }));
    for (const query of [`subject=${encodeURIComponent(subject)}`, `traceId=${encodeURIComponent(traceId)}`]) {
      const r = await call(s.url, 'GET', `/api/events?${query}`, { headers: bearer() });
      expect(r.status, `${query.slice(0, 10)}: ${r.text.slice(0, 300)}`).toBe(200);
      expect(r.json.events.map((e: { id: string }) => e.id)).toEqual([id]);
    }
    // The event page's trace-id link.
    const page = await call(s.url, 'GET', `/events/${id}`, { headers: { cookie: await login(s.url) } });
    const link = new RegExp(`href="(/events\\?traceId=[^"]+)"`).exec(page.text)?.[1];
    expect(link).toBeDefined();
    const linked = await call(s.url, 'GET', link!.replaceAll('&amp;', '&'), { headers: { cookie: await login(s.url) } });
    expect(linked.status).toBe(200);
    expect(linked.text).toContain(id);
  });

  // PostgreSQL refuses a NUL in a text parameter; these reached it and came back as a 500 with
  // pg's stack in the log (the panel's events and jobs pages too).
  test('a NUL in a text filter or a handler name is a 400 naming the parameter, not a 500', async () => {
    const { s } = await setup(target);
    const logged: unknown[] = [];
    const spy = vi.spyOn(console, 'error').mockImplementation((...m: unknown[]) => void logged.push(m));
    onTestFinished(() => spy.mockRestore());
    const event = '00000000-0000-7000-8000-000000000000';
    const cases: [string, string, string, unknown?][] = [
      ['GET', '/api/events?subject=a%00b', 'subject'],
      ['GET', '/api/events?traceId=%00', 'traceId'],
      ['GET', '/api/jobs?handler=mailer%00', 'handler'],
      ['POST', '/api/jobs/retry', 'handler', { state: 'discarded', handler: 'mailer\u0000' }],
      ['POST', `/api/events/${event}/replay`, 'handler', { handler: 'mailer\u0000' }],
      ['POST', '/api/events/replay', 'handler', { handler: '\u0000' }],
      ['POST', '/api/events/replay', 'subject', { handler: 'mailer', subject: 'a\u0000' }],
    ];
    for (const [method, path, parameter, body] of cases) {
      const r = await call(s.url, method, path, { headers: bearer(), body });
      expect(r.status, `${method} ${path}`).toBe(400);
      expect(r.json.error.parameter, `${method} ${path}`).toBe(parameter);
      expect(r.json.error.message, `${method} ${path}`).toMatch(/NUL/);
    }
    const cookie = await login(s.url);
    for (const path of ['/events?subject=%00', '/jobs?handler=%00']) {
      const page = await call(s.url, 'GET', path, { headers: { cookie } });
      expect(page.status, path).toBe(400);
      expect(page.text, path).toMatch(/invalid filter (subject|handler): holds a NUL/);
    }
    expect(logged).toEqual([]);
  });

  test('events: list with filters and cursor, one event with its jobs, requeue of a real poisoned event', async () => {
    const { bus, s } = await setup(target, { start: true });
    const done = bus.lifecycle.waitFor('job:completed');
    const ids = await bus.transaction(async (tx) => [
      await bus.record(tx, 'order.created', { orderNo: 'A1' }, { subject: 'A1', traceId: 'trace-1' }),
      await bus.record(tx, 'order.paid', { orderNo: 'A1' }, { subject: 'A1' }),
      await bus.record(tx, 'order.created', { orderNo: 'B2' }, { subject: 'B2' }),
    ]);
    await done;
    const all = await call(s.url, 'GET', '/api/events?limit=2', { headers: bearer() });
    expect(all.status).toBe(200);
    expect(all.json.events.map((e: { id: string }) => e.id)).toEqual([ids[2], ids[1]]);
    const older = await call(s.url, 'GET', `/api/events?limit=2&cursor=${all.json.nextCursor}`, { headers: bearer() });
    expect(older.json.events.map((e: { id: string }) => e.id)).toEqual([ids[0]]);
    expect(older.json.nextCursor).toBeNull();
    expect((await call(s.url, 'GET', '/api/events?subject=A1&type=order.paid', { headers: bearer() })).json.events).toHaveLength(1);
    expect((await call(s.url, 'GET', '/api/events?traceId=trace-1', { headers: bearer() })).json.events[0].id).toBe(ids[0]);
    const since = new Date(Date.now() - 60_000).toISOString();
    expect((await call(s.url, 'GET', `/api/events?since=${since}&type=order.*`, { headers: bearer() })).json.events).toHaveLength(3);
    const one = await call(s.url, 'GET', `/api/events/${ids[0]}`, { headers: bearer() });
    expect(one.json.event).toMatchObject({ id: ids[0], type: 'order.created', payload: { orderNo: 'A1' }, traceId: 'trace-1' });
    expect(one.json.jobs[0]).toMatchObject({ target: 'mailer', eventId: ids[0] });
    expect(one.json.attempts).toEqual([]);
    expect((await call(s.url, 'GET', '/api/events/00000000-0000-7000-8000-000000000000', { headers: bearer() })).status).toBe(404);
    await target.query(`update "${bus.schema}".events set fan_attempts = 1 where id = $1`, [ids[2]]);
    const page = await call(s.url, 'GET', `/events/${ids[2]}`, { headers: bearer() });
    expect(page.text).toContain('after 1 fan-out attempt<'); // not "1 fan-out attempts"

    const boom = await poisonOne(target, bus);
    expect((await call(s.url, 'GET', '/api/events?state=poisoned', { headers: bearer() })).json.events.map((e: { id: string }) => e.id)).toEqual([boom]);
    const ov = await call(s.url, 'GET', '/api/overview', { headers: bearer() });
    expect(ov.json.poisoned).toBe(1);
    expect(ov.json.alerts.map((a: { name: string }) => a.name)).toContain('events_poisoned');
    const fanned = bus.lifecycle.waitFor('relay:batch:fanned', (b) => b.eventIds.includes(boom));
    const r = await call(s.url, 'POST', '/api/events/requeue', { body: { ids: [boom] }, headers: bearer() });
    expect(r.json.requeued).toEqual([boom]);
    await fanned;
    const [row] = await target.query(`select poisoned_at, fan_attempts, fanned_out_at from "${bus.schema}".events where id = $1`, [boom]);
    expect(row).toMatchObject({ poisoned_at: null, fan_attempts: 0 });
    expect(row.fanned_out_at).not.toBeNull();
    expect((await call(s.url, 'GET', '/api/overview', { headers: bearer() })).json.alerts.map((a: { name: string }) => a.name)).not.toContain('events_poisoned');
  });

  test('requeue { poisoned: false } is a 400 naming poisoned, and requeues nothing', async () => {
    const { bus, s } = await setup(target, { start: true });
    const boom = await poisonOne(target, bus);
    // The flag schema took any boolean as true: "false" requeued every poisoned event.
    for (const poisoned of [false, 'false', 0, 'yes']) {
      const r = await call(s.url, 'POST', '/api/events/requeue', { body: { poisoned }, headers: bearer() });
      expect(r.status, JSON.stringify(poisoned)).toBe(400);
      expect(r.json.error).toMatchObject({ code: 'ERR_BAD_REQUEST', parameter: 'poisoned' });
    }
    const [row] = await target.query(`select poisoned_at from "${bus.schema}".events where id = $1`, [boom]);
    expect(row.poisoned_at).not.toBeNull();
    // The panel's form sends 'true'; JSON sends true.
    const form = await call(s.url, 'POST', '/api/events/requeue', { form: { poisoned: 'true' }, headers: bearer() });
    expect(form.status).toBe(303);
    expect((await call(s.url, 'POST', '/api/events/requeue', { body: { poisoned: true }, headers: bearer() })).status).toBe(200);
  });

  test('jobs: list by state and handler; discard, retry and cancel change the rows', async () => {
    const { bus, s } = await setup(target);
    await bus.start();
    await bus.stop();
    // A second bus on the schema with no worker: the jobs stay where the API puts them.
    const idle = await testBus(target, events, { schema: bus.schema, worker: { enabled: false }, relay: { enabled: false } });
    const h = createAdminHandler(idle, { auth: { token: TOKEN } });
    const t = await serve(h);
    await idle.transaction((tx) => idle.recordMany(tx, ['J1', 'J2', 'J3'].map((orderNo) => ({ type: 'order.created' as const, payload: { orderNo } }))));
    await idle.relayOnce();
    const list = await call(t.url, 'GET', '/api/jobs?handler=mailer&state=available&limit=2', { headers: bearer() });
    expect(list.json.jobs).toHaveLength(2);
    expect(list.json.nextCursor).toBe(list.json.jobs[1].id);
    const ids: string[] = (await call(t.url, 'GET', '/api/jobs', { headers: bearer() })).json.jobs.map((j: { id: string }) => j.id);
    expect(ids).toHaveLength(3);
    const state = async (id: string) => (await target.query(`select state from "${idle.schema}".jobs where id = $1`, [id]))[0].state;

    expect((await call(t.url, 'POST', '/api/jobs/discard', { body: { ids: [ids[0]] }, headers: bearer() })).json.discarded).toEqual([ids[0]]);
    expect(await state(ids[0]!)).toBe('discarded');
    expect((await call(t.url, 'GET', '/api/jobs?state=discarded', { headers: bearer() })).json.jobs.map((j: { id: string }) => j.id)).toEqual([ids[0]]);
    expect((await call(t.url, 'POST', '/api/jobs/retry', { body: { ids: [ids[0]] }, headers: bearer() })).json.retried).toEqual([ids[0]]);
    expect(await state(ids[0]!)).toBe('available');
    expect((await call(t.url, 'POST', '/api/jobs/cancel', { body: { ids: [ids[1]] }, headers: bearer() })).json.cancelled).toEqual([ids[1]]);
    expect(await state(ids[1]!)).toBe('cancelled');
    await call(t.url, 'POST', '/api/jobs/discard', { body: { ids: [ids[2]] }, headers: bearer() });
    const bulk = await call(t.url, 'POST', '/api/jobs/retry', { body: { state: 'discarded', handler: 'mailer' }, headers: bearer() });
    expect(bulk.json.retried).toEqual([ids[2]]);
    expect(await state(ids[2]!)).toBe('available');
    h.close();
  });

  test("the jobs page offers 'Retry all dead letters' only under filters the retry honours (state, handler)", async () => {
    const { bus: owner } = await setup(target);
    await owner.start(); // stores the subscription, so the relay makes jobs for it
    await owner.stop();
    const bus = await testBus(target, events, { schema: owner.schema, worker: { enabled: false }, relay: { enabled: false } });
    const s = await serve(createAdminHandler(bus, { auth: { token: TOKEN } }));
    const [first] = await bus.transaction((tx) => bus.recordMany(tx, ['R1', 'R2'].map((orderNo) => ({ type: 'order.created' as const, payload: { orderNo } }))));
    await bus.relayOnce();
    const jobIds: string[] = (await call(s.url, 'GET', '/api/jobs', { headers: bearer() })).json.jobs.map((j: { id: string }) => j.id);
    expect((await call(s.url, 'POST', '/api/jobs/discard', { body: { ids: jobIds }, headers: bearer() })).json.discarded).toHaveLength(2);
    const bulkForm = /<form method="post" action="\/api\/jobs\/retry"[^>]*>(?:(?!<\/form>).)*name="state" value="discarded"/s;
    const page = async (query: string) => (await call(s.url, 'GET', `/jobs?${query}`, { headers: bearer() })).text;

    // The retry takes no event id or kind: the button would have retried both dead letters
    // while the page showed one ("Retry every discarded job shown by this filter?").
    const oneEvent = await page(`state=discarded&eventId=${first}`);
    expect(oneEvent).toContain('<code>mailer</code>'); // the row is there, with its own Retry
    expect(oneEvent).not.toMatch(bulkForm);
    expect(await page('state=discarded&kind=handler')).not.toMatch(bulkForm);
    expect(oneEvent).toContain('Retry all works by handler only: with eventId set');
    // Without them it is offered, and its confirm says what it retries.
    expect(await page('state=discarded')).toMatch(bulkForm);
    expect(await page('state=discarded')).toContain('Retry every discarded job, of every handler, on every page?');
    expect(await page('state=discarded&handler=mailer')).toMatch(/name="handler" value="mailer"/);
    // kind=handler beside a handler adds nothing the retry does not honour (only handler jobs are
    // the handler's), so the button stays; kind=webhook would not.
    const handlerKind = await page('state=discarded&kind=handler&handler=mailer');
    expect(handlerKind).toMatch(bulkForm);
    expect(handlerKind).toContain('Retry all dead letters of mailer');
    expect(await page('state=discarded&kind=webhook&handler=mailer')).not.toMatch(bulkForm);
  });

  test('the jobs tabs, the filter form and the pager keep every active filter (kind, handler, event id, page size)', async () => {
    // Before, a tab kept only the handler: from jobs of one event, of kind handler, the
    // "Dead letters" tab showed every handler job of every event; the filter form dropped kind.
    const { bus: owner } = await setup(target);
    await owner.start(); // stores the subscription, so the relay makes jobs for it
    await owner.stop();
    const bus = await testBus(target, events, { schema: owner.schema, worker: { enabled: false }, relay: { enabled: false } });
    const s = await serve(createAdminHandler(bus, { auth: { token: TOKEN } }));
    const [first] = await bus.transaction((tx) => bus.recordMany(tx, ['R1', 'R2', 'R3'].map((orderNo) => ({ type: 'order.created' as const, payload: { orderNo } }))));
    await bus.relayOnce();
    const page = async (query: string) => (await call(s.url, 'GET', `/jobs?${query}`, { headers: bearer() })).text;
    const links = (html: string, cls: string) => {
      const nav = new RegExp(`<nav class="${cls}">(.*?)</nav>`, 's').exec(html)![1]!;
      return [...nav.matchAll(/href="\/jobs\?([^"]*)"/g)].map((m) => new URLSearchParams(m[1]!.replace(/&amp;/g, '&')));
    };

    const oneEvent = await page(`state=available&kind=handler&handler=mailer&eventId=${first}&limit=5`);
    const tabs = links(oneEvent, 'tabs');
    expect(tabs).toHaveLength(7);
    for (const q of tabs) {
      expect(Object.fromEntries([...q].filter(([k]) => k !== 'state'))).toEqual({ kind: 'handler', handler: 'mailer', eventId: first, limit: '5' });
    }
    expect(tabs.map((q) => q.get('state'))).toEqual(['discarded', 'retryable', 'available', 'running', 'cancelled', 'completed', null]);
    // Following the "Waiting" tab shows the one job of that event, as the page it came from did.
    const waiting = await page(tabs[2]!.toString());
    expect(waiting.match(/<code>mailer<\/code>/g)).toHaveLength(1);
    // The filter form submits the kind it shows, and the page size.
    expect(oneEvent).toMatch(/<select name="kind">.*<option value="handler" selected>handler<\/option>/s);
    expect(oneEvent).toContain('<input type="hidden" name="limit" value="5">');

    // The pager carries every filter too, and the tabs start over at the first page.
    const paged = await page('state=available&kind=handler&handler=mailer&limit=1');
    const [older] = links(paged, 'pager');
    expect(Object.fromEntries([...older!].filter(([k]) => k !== 'cursor'))).toEqual({ state: 'available', kind: 'handler', handler: 'mailer', limit: '1' });
    const second = await page(older!.toString());
    expect(second.match(/<code>mailer<\/code>/g)).toHaveLength(1);
    for (const q of links(second, 'tabs')) expect(q.has('cursor')).toBe(false);
  });

  test('endpoints come in pages: the API gives nextCursor, the panel links to more; past the first 1,000 too', async () => {
    const { bus, s } = await setup(target);
    // Before, the API, the panel and the CLI showed the oldest 1,000 and nothing said more existed.
    // Ids in creation order, as UUIDv7 ones are: the g-th endpoint's id sorts g-th.
    await target.query(`insert into "${bus.schema}".endpoints (id, url, event_types, like_patterns, secrets, secret_hint)
      select (lpad(to_hex(g), 8, '0') || '-0000-7000-8000-000000000000')::uuid, 'http://127.0.0.1:9/' || g, '{order.*}', '{order.%}',
             jsonb_build_array(jsonb_build_object('secret', 'whsec_x')), 'xxxx'
      from generate_series(1, 1001) g`);
    const first = (await call(s.url, 'GET', '/api/endpoints', { headers: bearer() })).json;
    expect(first.endpoints).toHaveLength(1000);
    expect(first.nextCursor).toBe(first.endpoints[999].id);
    const rest = (await call(s.url, 'GET', `/api/endpoints?cursor=${first.nextCursor}`, { headers: bearer() })).json;
    expect(rest.endpoints.map((e: { url: string }) => e.url)).toEqual(['http://127.0.0.1:9/1001']);
    expect(rest.nextCursor).toBeNull();
    // A full page that ends the list has no nextCursor (before, any full page had one).
    const lastFull = (await call(s.url, 'GET', `/api/endpoints?limit=1&cursor=${first.endpoints[999].id}`, { headers: bearer() })).json;
    expect(lastFull.endpoints.map((e: { url: string }) => e.url)).toEqual(['http://127.0.0.1:9/1001']);
    expect(lastFull.nextCursor).toBeNull();
    const two = (await call(s.url, 'GET', '/api/endpoints?limit=2', { headers: bearer() })).json;
    expect(two.endpoints.map((e: { url: string }) => e.url)).toEqual(['http://127.0.0.1:9/1', 'http://127.0.0.1:9/2']);
    for (const bad of ['limit=0', 'limit=1001', 'cursor=x']) {
      const r = await call(s.url, 'GET', `/api/endpoints?${bad}`, { headers: bearer() });
      expect(r.status).toBe(400);
      expect(r.json.error.parameter).toBe(bad.split('=')[0]);
    }
    const page = (await call(s.url, 'GET', '/endpoints?state=enabled', { headers: bearer() })).text;
    const next = /<a href="\/endpoints\?([^"]+)" rel="next">/.exec(page);
    expect(next).not.toBeNull();
    const after = (await call(s.url, 'GET', `/endpoints?${next![1]!.replace(/&amp;/g, '&')}`, { headers: bearer() })).text;
    expect(after).toContain('http://127.0.0.1:9/201<');
    expect(after).not.toContain('http://127.0.0.1:9/200<');
    // The panel's last page is full (200 endpoints, 802–1001) and links to no next page.
    const tail = (await call(s.url, 'GET', `/endpoints?cursor=${first.endpoints[800].id}`, { headers: bearer() })).text;
    expect(tail).toContain('http://127.0.0.1:9/802<');
    expect(tail).toContain('http://127.0.0.1:9/1001<');
    expect(tail).not.toContain('rel="next"');
  });

  test('the endpoints pages offer Disable for a failing endpoint too, and Enable only where there is something to clear', async () => {
    const { bus, s } = await setup(target);
    const ep = await bus.endpoints.create({ url: 'http://127.0.0.1:9/hook', eventTypes: ['order.*'] });
    const form = (action: string) => new RegExp(`<form method="post" action="/api/endpoints/${ep.id}/${action}"`);
    const pages = async () => Promise.all(['/endpoints', `/endpoints/${ep.id}`].map(async (path) => (await call(s.url, 'GET', path, { headers: bearer() })).text));
    for (const page of await pages()) {
      expect(page).toMatch(form('disable'));
      expect(page).not.toMatch(form('enable'));
    }
    // Failing, as after a failed delivery; before, its only state button was "Mark healthy".
    await target.query(`update "${bus.schema}".endpoints set state = 'failing', failing_since = now() where id = $1`, [ep.id]);
    for (const page of await pages()) {
      expect(page).toMatch(form('disable'));
      expect(page).toMatch(form('enable'));
      expect(page).toContain('Mark healthy');
    }
    await bus.endpoints.disable(ep.id);
    for (const page of await pages()) {
      expect(page).not.toMatch(form('disable'));
      expect(page).toContain('Re-enable');
    }
  });

  test('a webhook URL\'s ?token= never reaches a panel page, a confirm text or a notice (the redirect URL); a blank URL in the edit form keeps it', async () => {
    const { bus, s, origin } = await setup(target, { handlers: false });
    const url = 'http://127.0.0.1:9/hook?tenant=acme&token=TOPSECRET42&x-api-key=KEY77';
    const ep = await bus.endpoints.create({ url, eventTypes: ['order.*'] });
    const cookie = await login(s.url);
    const list = await call(s.url, 'GET', '/endpoints', { headers: { cookie } });
    const page = await call(s.url, 'GET', `/endpoints/${ep.id}`, { headers: { cookie } });
    for (const r of [list, page]) {
      expect(r.status).toBe(200);
      expect(r.text).not.toContain('TOPSECRET42');
      expect(r.text).not.toContain('KEY77');
      expect(r.text).toContain('tenant=acme&amp;token=***&amp;x-api-key=***');
    }
    const csrf = csrfFrom(page.text);
    const here = `/endpoints/${ep.id}`;
    for (const action of ['disable', 'enable']) {
      const r = await call(s.url, 'POST', `/api/endpoints/${ep.id}/${action}`, { form: { _csrf: csrf, _return: here }, headers: { cookie, origin } });
      expect(r.status).toBe(303);
      expect(decodeURIComponent(String(r.headers.location))).not.toContain('TOPSECRET42');
      expect(decodeURIComponent(String(r.headers.location))).toContain('token=***');
    }
    // The edit form as a browser sends it, URL left blank: the URL stays, the rest changes.
    const upd = await call(s.url, 'POST', `/api/endpoints/${ep.id}/update`, { form: { _csrf: csrf, _return: here, url: '', eventTypes: 'order.paid', description: 'v2' }, headers: { cookie, origin } });
    expect(upd.status).toBe(303);
    expect(decodeURIComponent(String(upd.headers.location))).not.toContain('TOPSECRET42');
    expect((await bus.endpoints.get(ep.id))).toMatchObject({ url, eventTypes: ['order.paid'], description: 'v2' });
    // A JSON body must still give a real URL.
    expect((await call(s.url, 'POST', `/api/endpoints/${ep.id}/update`, { body: { url: '' }, headers: bearer() })).status).toBe(400);
    // A URL without secret parts is shown and edited as it is.
    const plain = await bus.endpoints.create({ url: 'http://127.0.0.1:9/plain?page=2', eventTypes: ['order.*'] });
    expect((await call(s.url, 'GET', `/endpoints/${plain.id}`, { headers: { cookie } })).text).toContain('value="http://127.0.0.1:9/plain?page=2"');
  });

  test('endpoints: create returns the secret once; list, get, disable, enable, rotate, test and the attempt log', async () => {
    const { bus, s } = await setup(target, { start: true, handlers: false });
    const received: string[] = [];
    const receiver = await serve((req, res) => {
      received.push(String(req.headers['webhook-id']));
      res.statusCode = 204;
      res.end();
    });
    const created = await call(s.url, 'POST', '/api/endpoints', { body: { url: `${receiver.url}/hook`, eventTypes: ['order.*'], description: 'warehouse' }, headers: bearer() });
    expect(created.status).toBe(201);
    expect(created.json.secret).toMatch(/^whsec_/);
    const id = created.json.endpoint.id as string;
    const secret = created.json.secret as string;
    for (const path of ['/api/endpoints', `/api/endpoints/${id}`]) {
      const r = await call(s.url, 'GET', path, { headers: bearer() });
      expect(r.status).toBe(200);
      expect(r.text).not.toContain(secret);
      expect(r.text).not.toContain('whsec_');
    }
    expect((await call(s.url, 'GET', '/api/endpoints', { headers: bearer() })).json.endpoints[0]).toMatchObject({ id, state: 'enabled', secretHint: secret.slice(-5, -1), lastSuccessAt: null });

    const dis = await call(s.url, 'POST', `/api/endpoints/${id}/disable`, { body: { reason: 'receiver moved' }, headers: bearer() });
    expect(dis.json.endpoint).toMatchObject({ state: 'disabled', disabledReason: 'receiver moved' });
    expect((await target.query(`select state from "${bus.schema}".endpoints where id = $1`, [id]))[0].state).toBe('disabled');
    expect((await call(s.url, 'GET', '/api/endpoints?state=disabled', { headers: bearer() })).json.endpoints).toHaveLength(1);
    const en = await call(s.url, 'POST', `/api/endpoints/${id}/enable`, { headers: bearer() });
    expect(en.json.endpoint).toMatchObject({ state: 'enabled', disabledReason: null });
    expect((await target.query(`select state, disabled_at from "${bus.schema}".endpoints where id = $1`, [id]))[0]).toMatchObject({ state: 'enabled', disabled_at: null });

    const upd = await call(s.url, 'POST', `/api/endpoints/${id}/update`, { body: { eventTypes: 'order.paid, order.created', description: 'warehouse v2' }, headers: bearer() });
    expect(upd.status).toBe(200);
    expect(upd.json.endpoint).toMatchObject({ id, url: `${receiver.url}/hook`, eventTypes: ['order.paid', 'order.created'], description: 'warehouse v2', state: 'enabled' });
    // The API takes what bus.endpoints takes: a description of 800 characters (the CLI's, the
    // code's) was a 400 here, so such an endpoint could not be edited from the panel at all.
    const long = 'd'.repeat(800);
    await bus.endpoints.update(id, { description: long });
    const keep = await call(s.url, 'POST', `/api/endpoints/${id}/update`, { body: { description: long, eventTypes: 'order.paid' }, headers: bearer() });
    expect(keep.status).toBe(200);
    expect(keep.json.endpoint).toMatchObject({ description: long, eventTypes: ['order.paid'] });
    const tooLong = await call(s.url, 'POST', `/api/endpoints/${id}/update`, { body: { description: 'd'.repeat(1001) }, headers: bearer() });
    expect(tooLong.status).toBe(400);
    expect(tooLong.json.error).toMatchObject({ code: 'ERR_OPTIONS', parameter: 'description' });
    expect((await call(s.url, 'POST', '/api/endpoints', { body: { url: `https://example.com/${'u'.repeat(2100)}`, eventTypes: 'order.paid' }, headers: bearer() })).json.error)
      .toMatchObject({ code: 'ERR_OPTIONS', parameter: 'url' });
    const empty = await call(s.url, 'POST', `/api/endpoints/${id}/update`, { body: {}, headers: bearer() });
    expect(empty.status).toBe(400);
    expect(empty.text).toContain('give at least one of url, eventTypes, description');
    const badUrl = await call(s.url, 'POST', `/api/endpoints/${id}/update`, { body: { url: 'ftp://x' }, headers: bearer() });
    expect(badUrl.status).toBe(400);
    expect((await call(s.url, 'GET', `/api/endpoints/${id}`, { headers: bearer() })).json.endpoint.url).toBe(`${receiver.url}/hook`);

    // A disable reason likewise: the bus takes 1,000 characters, the route capped it at 500.
    const tooLongReason = await call(s.url, 'POST', `/api/endpoints/${id}/disable`, { body: { reason: 'r'.repeat(1001) }, headers: bearer() });
    expect(tooLongReason.status).toBe(400);
    expect(tooLongReason.json.error).toMatchObject({ code: 'ERR_OPTIONS', parameter: 'reason' });
    const longReason = await call(s.url, 'POST', `/api/endpoints/${id}/disable`, { body: { reason: 'r'.repeat(800) }, headers: bearer() });
    expect(longReason.json.endpoint).toMatchObject({ state: 'disabled', disabledReason: 'r'.repeat(800) });
    await call(s.url, 'POST', `/api/endpoints/${id}/enable`, { headers: bearer() });

    const rot = await call(s.url, 'POST', `/api/endpoints/${id}/rotate`, { headers: bearer() });
    expect(rot.json.secret).toMatch(/^whsec_/);
    expect(rot.json.secret).not.toBe(secret);
    expect(rot.json.endpoint.secretHint).toBe(rot.json.secret.slice(-5, -1));

    const test = await call(s.url, 'POST', `/api/endpoints/${id}/test`, { headers: bearer() });
    expect(test.status).toBe(200);
    expect(test.json.attempt).toMatchObject({ outcome: 'success', status: 204 });
    expect(received).toHaveLength(1);

    // A real delivery, its attempt on the event page data, and a resend.
    const attempted = bus.lifecycle.waitFor('webhook:attempt' as never, (e: { jobId: string | null }) => e.jobId !== null);
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: 'W1' }));
    await attempted;
    const ev = await call(s.url, 'GET', `/api/events/${eventId}`, { headers: bearer() });
    expect(ev.json.attempts).toHaveLength(1);
    expect(ev.json.attempts[0]).toMatchObject({ outcome: 'success', endpointId: id });
    // The delivery's success is noted on the endpoint (its first: at once), and every read shows it;
    // the test delivery before it was not.
    const lastSuccessAt = ev.json.attempts[0].at as string;
    expect((await call(s.url, 'GET', `/api/endpoints/${id}`, { headers: bearer() })).json.endpoint.lastSuccessAt).toBe(lastSuccessAt);
    expect((await call(s.url, 'GET', '/api/endpoints', { headers: bearer() })).json.endpoints[0].lastSuccessAt).toBe(lastSuccessAt);
    const endpointPage = (await call(s.url, 'GET', `/endpoints/${id}`, { headers: bearer() })).text;
    expect(endpointPage).toContain(`<dt>Last success</dt><dd><time datetime="${lastSuccessAt}"`);
    const endpointsPage = (await call(s.url, 'GET', '/endpoints', { headers: bearer() })).text;
    expect(endpointsPage).toContain(`<td data-label="Last success"><time datetime="${lastSuccessAt}"`);
    const log = await call(s.url, 'GET', `/api/endpoints/${id}/attempts?limit=1`, { headers: bearer() });
    expect(log.json.attempts).toHaveLength(1);
    expect(log.json.nextCursor).not.toBeNull();
    const again = bus.lifecycle.waitFor('webhook:attempt' as never, (e: { jobId: string | null }) => e.jobId !== null);
    const resend = await call(s.url, 'POST', `/api/deliveries/${ev.json.attempts[0].deliveryId}/resend`, { headers: bearer() });
    expect(resend.json.delivery).toMatchObject({ eventId, endpointId: id });
    await again;
    const replayed = bus.lifecycle.waitFor('webhook:attempt' as never, (e: { jobId: string | null }) => e.jobId !== null);
    const replay = await call(s.url, 'POST', `/api/events/${eventId}/replay`, { body: { endpointId: id }, headers: bearer() });
    expect(replay.json.delivery).toMatchObject({ eventId, endpointId: id });
    await replayed;
    expect(new Set(received).size).toBe(4);
    expect((await call(s.url, 'POST', `/api/endpoints/00000000-0000-7000-8000-000000000000/enable`, { headers: bearer() })).status).toBe(404);

    const del = await call(s.url, 'POST', `/api/endpoints/${id}/delete`, { headers: bearer() });
    expect(del).toMatchObject({ status: 200, json: { deleted: id, cancelled: 0 } });
    expect((await call(s.url, 'GET', `/api/endpoints/${id}`, { headers: bearer() })).status).toBe(404);
    expect(await target.query(`select id from "${bus.schema}".endpoints`)).toEqual([]);
    expect((await call(s.url, 'POST', `/api/endpoints/${id}/delete`, { headers: bearer() })).status).toBe(404);
  });

  // An unknown id answered 200 { attempts: [] }, the answer of a real endpoint never called: a
  // mistyped id looked like a quiet endpoint. The log outlives its endpoint, so a deleted one with
  // attempts still lists them.
  test('the attempt log of an id with neither an endpoint nor an attempt is a 404; a deleted endpoint keeps its log', async () => {
    const { bus, s } = await setup(target, { handlers: false });
    const receiver = await serve((_req, res) => {
      res.statusCode = 204;
      res.end();
    });
    const unknown = '00000000-0000-7000-8000-000000000000';
    const none = await call(s.url, 'GET', `/api/endpoints/${unknown}/attempts`, { headers: bearer() });
    expect(none).toMatchObject({ status: 404, json: { error: { code: 'ERR_NOT_FOUND', message: `endpoint ${unknown} not found` } } });
    expect((await call(s.url, 'GET', `/api/endpoints/${unknown}/attempts?cursor=1`, { headers: bearer() })).status).toBe(404);

    // A live endpoint never called: an empty log, not a 404.
    const quiet = await bus.endpoints.create({ url: `${receiver.url}/quiet`, eventTypes: ['order.*'] });
    expect(await call(s.url, 'GET', `/api/endpoints/${quiet.id}/attempts`, { headers: bearer() })).toMatchObject({ status: 200, json: { attempts: [], nextCursor: null } });

    const ep = await bus.endpoints.create({ url: `${receiver.url}/hook`, eventTypes: ['order.*'] });
    expect((await bus.endpoints.test(ep.id)).outcome).toBe('success');
    expect((await bus.endpoints.test(ep.id)).outcome).toBe('success');
    await bus.endpoints.delete(ep.id);
    expect((await call(s.url, 'GET', `/api/endpoints/${ep.id}`, { headers: bearer() })).status).toBe(404);
    const first = await call(s.url, 'GET', `/api/endpoints/${ep.id}/attempts?limit=1`, { headers: bearer() });
    expect(first.status).toBe(200);
    expect(first.json.attempts).toHaveLength(1);
    expect(first.json.attempts[0]).toMatchObject({ endpointId: ep.id, outcome: 'success' });
    const second = await call(s.url, 'GET', `/api/endpoints/${ep.id}/attempts?limit=1&cursor=${first.json.nextCursor}`, { headers: bearer() });
    expect(second.status).toBe(200);
    expect(second.json.attempts).toHaveLength(1);
    // Past the last attempt of a deleted endpoint: an empty page of a log that exists.
    const past = await call(s.url, 'GET', `/api/endpoints/${ep.id}/attempts?cursor=${second.json.attempts[0].id}`, { headers: bearer() });
    expect(past).toMatchObject({ status: 200, json: { attempts: [], nextCursor: null } });
  });

  // The body was not read: { graceMs: 0 }, sent to retire a leaked secret at once, was dropped and
  // the old secret went on verifying for the default 24 h.
  test('rotate takes { graceMs }: 0 ends the old secret now; a bad or unknown field is a 400', async () => {
    const { bus, s } = await setup(target);
    const ep = await bus.endpoints.create({ url: 'http://127.0.0.1:9/hook', eventTypes: ['order.*'] });
    const secrets = async () => (await target.query<{ secrets: { secret: string; expires_at: string | null }[] }>(
      `select secrets from "${bus.schema}".endpoints where id = $1`, [ep.id]))[0]!.secrets;
    const now = await call(s.url, 'POST', `/api/endpoints/${ep.id}/rotate`, { body: { graceMs: 0 }, headers: bearer() });
    expect(now.status).toBe(200);
    const old = (await secrets()).find((x) => x.secret === ep.secret)!;
    expect(Date.parse(old.expires_at!)).toBeLessThanOrEqual(Date.now());
    // Without graceMs: the configured grace (24 h by default).
    const later = await call(s.url, 'POST', `/api/endpoints/${ep.id}/rotate`, { headers: bearer() });
    const previous = (await secrets()).find((x) => x.secret === now.json.secret)!;
    expect(Date.parse(previous.expires_at!)).toBeGreaterThan(Date.now() + 23 * 3_600_000);
    expect(later.json.secret).not.toBe(now.json.secret);
    for (const [body, parameter] of [[{ graceMs: -1 }, 'graceMs'], [{ graceMs: 'soon' }, 'graceMs'], [{ graceMs: null }, 'graceMs'], [{ grace: 0 }, 'grace']] as const) {
      const r = await call(s.url, 'POST', `/api/endpoints/${ep.id}/rotate`, { body, headers: bearer() });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.json.error.parameter).toBe(parameter);
    }
  });

  test('create and rotate take the receiver\'s own secret (bare base64 or whsec_…); a bad one is a 400 naming secret, never echoing it, and nothing changes', async () => {
    const { bus, s } = await setup(target);
    const bare = randomBytes(32).toString('base64');
    const created = await call(s.url, 'POST', '/api/endpoints', { body: { url: 'http://127.0.0.1:9/hook', eventTypes: ['order.*'], secret: bare }, headers: bearer() });
    expect(created.status).toBe(201);
    expect(created.json.secret).toBe(`whsec_${bare}`);
    const id = created.json.endpoint.id as string;
    const own = `whsec_${randomBytes(32).toString('base64')}`;
    const rotated = await call(s.url, 'POST', `/api/endpoints/${id}/rotate`, { body: { secret: own, graceMs: 0 }, headers: bearer() });
    expect(rotated.status).toBe(200);
    expect(rotated.json.secret).toBe(own);
    const short = randomBytes(16).toString('base64');
    for (const [path, body] of [
      ['/api/endpoints', { url: 'http://127.0.0.1:9/other', eventTypes: ['order.*'], secret: short }],
      [`/api/endpoints/${id}/rotate`, { secret: short }],
      [`/api/endpoints/${id}/rotate`, { secret: 42 }],
    ] as const) {
      const r = await call(s.url, 'POST', path, { body, headers: bearer() });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.json.error.parameter).toBe('secret');
      expect(r.text).not.toContain(short);
    }
    expect((await bus.endpoints.list()).map((e) => e.id)).toEqual([id]);
    const stored = await target.query<{ secrets: { secret: string }[] }>(`select secrets from "${bus.schema}".endpoints where id = $1`, [id]);
    expect(stored[0]!.secrets.map((x) => x.secret).filter((x) => x !== `whsec_${bare}`)).toEqual([own]);
  });

  test('from the panel, add endpoint and rotate answer with a page that shows the secret once (a redirect would lose it)', async () => {
    const { bus, s } = await setup(target);
    const cookie = await login(s.url);
    const csrf = csrfFrom((await call(s.url, 'GET', '/endpoints', { headers: { cookie } })).text);
    const headers = { cookie, origin: s.url };
    const added = await call(s.url, 'POST', '/api/endpoints', { form: { url: 'https://hooks.example.com/in', eventTypes: 'order.*', _csrf: csrf, _return: '/endpoints' }, headers });
    expect(added.status).toBe(200);
    expect(added.headers['content-type']).toMatch(/^text\/html/);
    expect(added.headers['cache-control']).toBe('no-store');
    const [row] = await target.query(`select id, secrets->0->>'secret' as secret from "${bus.schema}".endpoints`);
    expect(added.text).toContain(`<code>${row.secret}</code>`);
    expect(added.text).toContain('href="/endpoints"');

    const rotated = await call(s.url, 'POST', `/api/endpoints/${row.id}/rotate`, { form: { _csrf: csrf, _return: `/endpoints/${row.id}` }, headers });
    expect(rotated.status).toBe(200);
    const [after] = await target.query(`select secrets->0->>'secret' as secret from "${bus.schema}".endpoints`);
    expect(after.secret).not.toBe(row.secret);
    expect(rotated.text).toContain(`<code>${after.secret}</code>`);
    expect(rotated.text).not.toContain(row.secret);
    // Everywhere else the panel shows the last four characters before the padding only.
    const page = await call(s.url, 'GET', `/endpoints/${row.id}`, { headers: { cookie } });
    expect(page.text).not.toContain(after.secret);
    expect(page.text).toContain(`…${after.secret.slice(-5, -1)}`);
  });

  test('healthz: public; 200 with a live leader, 503 without; metrics: Prometheus text with the figures', async () => {
    const { bus, s } = await setup(target);
    const before = await call(s.url, 'GET', '/healthz');
    expect(before.status).toBe(503);
    expect(before.json).toMatchObject({ database: 'up', leader: 'none' });
    const elected = bus.lifecycle.waitFor('leader:elected');
    await bus.start();
    await elected;
    const after = await call(s.url, 'GET', '/healthz');
    expect(after.status).toBe(200);
    expect(after.json).toMatchObject({ status: 'ok', database: 'up', leader: 'seen' });
    // A lease that has not expired has no "expired ago", and says how long it is still valid.
    expect(after.json.leaderExpiredAgoMs).toBeNull();
    expect(after.json.leaderValidForMs).toBeGreaterThan(0);

    const done = bus.lifecycle.waitFor('job:completed');
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'M1' }));
    await done;
    const m = await call(s.url, 'GET', '/metrics', { headers: bearer() });
    expect(m.status).toBe(200);
    expect(m.headers['content-type']).toContain('text/plain');
    for (const line of [
      'rea_events_backlog 0', 'rea_events_poisoned 0', 'rea_events_oldest_unfanned_age_seconds 0',
      'rea_jobs{state="completed"} 1', 'rea_leader_lease_valid 1', 'rea_webhook_deliveries_total{outcome="success"} 0',
    ]) expect(m.text).toContain(line);
    expect(m.text).toMatch(/rea_handler_duration_seconds_count\{handler="mailer",kind="handler"\} 1/);
    expect(m.text).toMatch(/rea_table_size_bytes\{table="events"\} \d+/);
    expect(m.text).not.toContain('process_cpu'); // a private registry: no default metrics of the host app
    // Every alert has its series before it is ever raised, at 0.
    for (const alert of ['events_backlog', 'events_poisoned', 'jobs_discarded', 'jobs_waiting', 'handler_unattended', 'endpoint_disabled']) {
      expect(m.text).toContain(`rea_alert_active{alert="${alert}"} 0`);
    }
  });

  test('rea_handler_duration_seconds keeps webhook deliveries in one series, not one per endpoint', async () => {
    // An endpoint id as a label value made 15 series (buckets, sum, count) per endpoint in every
    // process: 300,000 with 20,000 endpoints. Per-endpoint figures are the attempt log's.
    const { bus, s } = await setup(target, { handlers: false, start: true });
    const r = await receiver((_q, res) => { res.statusCode = 204; res.end(); });
    const endpoints = [await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'] }), await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'] })];
    let completed = 0;
    const both = new Promise<void>((resolve) => bus.lifecycle.on('job:completed', (e) => { if (e.kind === 'webhook' && ++completed === 2) resolve(); }));
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'W2' }));
    await both;
    const text = (await call(s.url, 'GET', '/metrics', { headers: bearer() })).text;
    expect(text).toMatch(/rea_handler_duration_seconds_count\{handler="",kind="webhook"\} 2/);
    for (const ep of endpoints) expect(text).not.toContain(ep.id);
  });

  test('processMetrics: false leaves out the series only a process that runs handlers can count; the shared gauges stay', async () => {
    // rea panel, or a web server that only records, showed rea_webhook_deliveries_total{outcome="failure"} 0
    // and an empty duration histogram while the workers elsewhere failed: zeros that read as "all well".
    const { bus } = await setup(target);
    const s = await serve(createAdminHandler(bus, { auth: { token: TOKEN }, processMetrics: false }));
    const text = (await call(s.url, 'GET', '/metrics', { headers: bearer() })).text;
    expect(text).toContain('rea_events_backlog 0');
    expect(text).toContain('rea_alert_active{alert="events_poisoned"} 0');
    expect(text).not.toContain('rea_webhook_deliveries_total');
    expect(text).not.toContain('rea_handler_duration_seconds');
    expect(() => createAdminHandler(bus, { auth: 'none', processMetrics: 'no' as never })).toThrow(/processMetrics: must be true or false, not "no"/);
  });

  test('rea_webhook_deliveries_total counts deliveries of events, not test deliveries', async () => {
    const { bus, s } = await setup(target, { handlers: false, start: true });
    const r = await receiver((_q, res) => { res.statusCode = 500; res.end('down'); });
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'] });
    const failures = async () => Number(/rea_webhook_deliveries_total\{outcome="failure"\} (\d+)/.exec((await call(s.url, 'GET', '/metrics', { headers: bearer() })).text)![1]);
    const probed = bus.lifecycle.waitFor('webhook:attempt', (e) => e.jobId === null);
    expect((await bus.endpoints.test(ep.id)).outcome).toBe('failure');
    await probed;
    expect(await failures()).toBe(0);
    const delivered = bus.lifecycle.waitFor('webhook:attempt', (e) => e.jobId !== null);
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'W1' }));
    await delivered;
    expect(await failures()).toBe(1);
  });

  test('stored XSS in payload, subject and type-like fields renders as text', async () => {
    const { bus, s } = await setup(target, { handlers: false });
    const xss = '<script>window.__pwned=1</script>"><img src=x onerror=alert(1)>';
    const id = await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: xss, note: xss }, { subject: xss, traceId: xss, createdBy: xss }));
    const cookie = await login(s.url);
    for (const path of ['/events', `/events/${id}`, `/events?subject=${encodeURIComponent(xss)}`]) {
      const page = await call(s.url, 'GET', path, { headers: { cookie } });
      expect(page.status, path).toBe(200);
      expect(page.text).not.toContain('<script>window.__pwned');
      expect(page.text).not.toContain('<img src=x');
      expect(page.text).toContain('&lt;script&gt;window.__pwned=1&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=alert(1)&gt;');
    }
  });

  test('a notice shows only when the panel signed it for this session; it stays out of the login redirect', async () => {
    const { s } = await setup(target);
    const cookie = await login(s.url);
    const forged = 'Token rotated: send it to ops@evil.example';
    // Any page rendered ?notice= as the green status line, whoever wrote the link.
    const page = await call(s.url, 'GET', `/events?notice=${encodeURIComponent(forged)}`, { headers: { cookie } });
    expect(page.status).toBe(200);
    expect(page.text).not.toContain('ops@evil.example');
    expect(page.text).not.toContain('role="status"');
    // An action's redirect carries it signed: the page it leads to shows it.
    const csrf = csrfFrom((await call(s.url, 'GET', '/', { headers: { cookie } })).text);
    const done = await call(s.url, 'POST', '/api/events/requeue', { form: { poisoned: 'true', _csrf: csrf, _return: '/events' }, headers: { cookie, origin: s.url } });
    expect(done.status).toBe(303);
    const back = done.headers.location!;
    expect(back).toMatch(/^\/events\?notice=Requeued.*&noticeSig=/);
    expect((await call(s.url, 'GET', back, { headers: { cookie } })).text).toContain('<p class="notice" role="status">Requeued 0 events.</p>');
    // Its signature does not carry over to other words, nor to another session.
    const tampered = back.replace('Requeued', 'Deleted');
    expect((await call(s.url, 'GET', tampered, { headers: { cookie } })).text).not.toContain('role="status"');
    const other = await login(s.url);
    expect((await call(s.url, 'GET', back, { headers: { cookie: other } })).text).not.toContain('role="status"');
    // A refused form comes back with its reason, signed too.
    const refused = await call(s.url, 'POST', '/api/jobs/retry', { form: { ids: 'x', _csrf: csrf, _return: '/jobs' }, headers: { cookie, origin: s.url, referer: `${s.url}/jobs?state=discarded` } });
    expect(refused.headers.location).toMatch(/^\/jobs\?state=discarded&notice=Refused.*&noticeSig=/);
    expect((await call(s.url, 'GET', refused.headers.location!, { headers: { cookie } })).text).toContain('role="status">Refused: ');
    // Logged out, the notice is not carried into the login's next.
    const toLogin = await call(s.url, 'GET', `/events?type=order.*&notice=${encodeURIComponent(forged)}`);
    expect(toLogin.headers.location).toBe(`/login?next=${encodeURIComponent('/events?type=order.*')}`);
  });

  test('mounted in Express under /admin: API and pages, links carry the mount path', async () => {
    const { bus } = await setup(target);
    const app = express();
    const handler = createAdminHandler(bus, { auth: { token: TOKEN } });
    app.use('/admin', handler);
    app.get('/', (_req, res) => void res.send('app'));
    const s = await serve(app);
    expect((await call(s.url, 'GET', '/admin/api/overview', { headers: bearer() })).json).toMatchObject({ backlog: 0 });
    expect((await call(s.url, 'GET', '/admin/api/overview')).status).toBe(401);
    expect((await call(s.url, 'GET', '/admin/')).headers.location).toBe('/admin/login');
    const cookie = await login(s.url, '/admin');
    const page = await call(s.url, 'GET', '/admin/', { headers: { cookie } });
    expect(page.status).toBe(200);
    expect(page.text).toContain('href="/admin/events"');
    const csrf = csrfFrom(page.text);
    const r = await call(s.url, 'POST', '/admin/api/events/requeue', { form: { poisoned: 'true', _csrf: csrf, _return: '/' }, headers: { cookie, origin: s.url } });
    expect(r.status).toBe(303);
    expect(r.headers.location).toMatch(/^\/admin\/\?notice=/);
    expect((await call(s.url, 'GET', '/')).text).toBe('app');
    // With express.json() ahead of it, the already-parsed body is used.
    const app2 = express();
    app2.use(express.json());
    app2.use('/ops', handler);
    const s2 = await serve(app2);
    expect((await call(s2.url, 'POST', '/ops/api/jobs/discard', { body: { ids: ['1'] }, headers: bearer() })).json).toEqual({ discarded: [] });
    expect((await call(s2.url, 'POST', '/ops/api/jobs/discard', { body: { ids: ['x'] }, headers: bearer() })).json.error.parameter).toBe('ids');
  });

  test("node:http with basePath; auth 'none' serves loopback clients with a loopback Host only", async () => {
    const { bus } = await setup(target);
    const based = createAdminHandler(bus, { auth: { token: TOKEN }, basePath: '/ops' });
    const s = await serve(based);
    expect((await call(s.url, 'GET', '/ops/api/overview', { headers: bearer() })).status).toBe(200);
    expect((await call(s.url, 'GET', '/ops/', { headers: { cookie: await login(s.url, '/ops') } })).text).toContain('href="/ops/jobs"');

    const open = createAdminHandler(bus, { auth: 'none' });
    const local = await serve(open);
    expect((await call(local.url, 'GET', '/api/overview')).status).toBe(200);
    const page = await call(local.url, 'GET', '/');
    expect(page.status).toBe(200);
    // DNS rebinding: a loopback peer, but a Host the attacker controls.
    expect((await call(local.url, 'GET', '/api/overview', { headers: { host: 'evil.example' } })).status).toBe(403);
    // Cross-site POST and a POST without the page's CSRF token are refused even on loopback.
    expect((await call(local.url, 'POST', '/api/events/requeue', { body: { poisoned: true }, headers: { origin: 'https://evil.example' } })).status).toBe(403);
    expect((await call(local.url, 'POST', '/api/events/requeue', { body: { poisoned: true }, headers: { origin: local.url } })).status).toBe(403);
    expect((await call(local.url, 'POST', '/api/events/requeue', { body: { poisoned: true }, headers: { origin: local.url, 'x-csrf-token': csrfFrom(page.text) } })).status).toBe(200);
    // A peer that is not loopback (as seen through a proxy or a public bind) is refused.
    const remote = await serve((req, res) => {
      Object.defineProperty(req.socket, 'remoteAddress', { value: '10.1.2.3', configurable: true });
      open(req, res);
    });
    expect((await call(remote.url, 'GET', '/api/overview')).status).toBe(403);
    // A reverse proxy on this machine is a loopback peer with a loopback Host (nginx passes its
    // upstream's name): what it forwards may come from anyone, and was served as a local operator.
    for (const [name, value] of [['x-forwarded-for', '203.0.113.9'], ['forwarded', 'for=203.0.113.9'], ['x-real-ip', '203.0.113.9'], ['via', '1.1 nginx']] as const) {
      const proxied = await call(local.url, 'GET', '/api/overview', { headers: { [name]: value } });
      expect(proxied.status, name).toBe(403);
      expect(proxied.json.error.message, name).toContain(`came through a proxy (${name})`);
      expect((await call(local.url, 'GET', '/', { headers: { [name]: value } })).status, name).toBe(403);
    }
  });
});

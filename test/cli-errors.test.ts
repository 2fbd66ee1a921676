// What a user who gets something wrong is told: a connection string pg would misread, a database
// that is down, refusing or not migrated, a mistyped PGlite directory, conflicting or malformed
// flags. Each is a typed error naming the problem (and the flag), never the password, with exit
// code 2 for a wrong command line and 1 for a database that cannot be used.
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { main } from '../src/cli/main.js';
import { createBus, DatabaseError, defineEvents, OptionsError, ReaError } from '../src/index.js';
import { checkConnectionString, describeConnection, LATEST_MIGRATION } from '../src/drivers/postgres/common.js';
import { describeTargets, freshSchema, PG_URL, postgresTarget, testBus } from './helpers/db.js';
import { bearer, call, TOKEN } from './helpers/admin.js';
import { startPanel } from '../src/cli/panel.js';

const SECRET = 's3cretpw';
const execFileAsync = promisify(execFile);
const hasPsql = spawnSync('psql', ['--version']).status === 0;
const events = defineEvents({ 'note.saved': z.object({ n: z.number() }) });

/** Run `rea …` in-process; everything it printed (stdout, stderr, commander's own output) and its exit code. */
async function rea(...args: string[]): Promise<{ text: string; code: number }> {
  const out: string[] = [];
  const collect = (...m: unknown[]) => void out.push(m.join(' '));
  vi.spyOn(console, 'log').mockImplementation(collect);
  vi.spyOn(console, 'error').mockImplementation(collect);
  vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => (collect(String(chunk)), true));
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => (collect(String(chunk)), true));
  const before = process.exitCode;
  process.exitCode = undefined;
  try {
    await main(['node', 'rea', ...args]);
    return { text: out.join('\n'), code: Number(process.exitCode ?? 0) };
  } finally {
    vi.restoreAllMocks();
    process.exitCode = before;
  }
}

afterEach(() => vi.restoreAllMocks());

describe('rea: command-line mistakes', () => {
  it.each([
    ['notaurl', /--database-url: not a valid connection URL \(no scheme:\/\/\)/],
    [`mysql://root:${SECRET}@127.0.0.1/test`, /--database-url: a mysql:\/\/ URL is not PostgreSQL/],
    [`http://u:${SECRET}@127.0.0.1/`, /--database-url: a http:\/\/ URL is not PostgreSQL/],
    [`postgres://postgres:${SECRET}@127.0.0.1:abc/x`, /--database-url: not a valid connection URL/],
    // A password with '/', '?' or '#' not percent-encoded: the URL's host would be the user name
    // and the password part of the database name, which messages show.
    [`postgres://app:/${SECRET}@127.0.0.1:5432/prod`, /--database-url: an '@' after the host: percent-encode/],
    [`postgres://app:2024/${SECRET}@127.0.0.1:5432/prod`, /--database-url: an '@' after the host: percent-encode/],
    [`postgres://app:12?${SECRET}@127.0.0.1:5432/prod`, /--database-url: an '@' after the host: percent-encode/],
    [`postgres://app:12#${SECRET}@127.0.0.1:5432/prod`, /--database-url: an '@' after the host: percent-encode/],
  ])('refuses the connection string %s before connecting, naming the flag and not the password', async (url, message) => {
    const r = await rea('status', '--database-url', url);
    expect(r.code).toBe(2);
    expect(r.text).toMatch(message);
    expect(r.text).toContain('expected postgres://user:password@host:port/database');
    expect(r.text).not.toContain(SECRET);
  });

  // The driver checks them too, under its option's name: 'invalid option database.postgres'.
  it.each([
    ['connect_timeout=abc', "connect_timeout in the connection string takes whole seconds (0 to 2147483), not 'abc'"],
    ['keepalives=2', "keepalives in the connection string is 1 or 0, not '2'"],
    ['keepalives_idle=-1', "keepalives_idle in the connection string takes whole seconds (0 to 2147483), not '-1'"],
  ])('a malformed %s in the connection string names --database-url (or DATABASE_URL), not the password', async (param, message) => {
    const url = `postgres://u:${SECRET}@127.0.0.1:5432/db?${param}`;
    const r = await rea('status', '--database-url', url);
    expect(r).toEqual({ code: 2, text: `rea: invalid option --database-url: ${message}` });
    vi.stubEnv('DATABASE_URL', url);
    try {
      expect(await rea('status')).toEqual({ code: 2, text: `rea: invalid option DATABASE_URL: ${message}` });
    } finally {
      vi.unstubAllEnvs();
    }
  });

  // It said 'run every retention rule once', and the report never had the webhook attempt log.
  it('rea retention run --help says which rules it runs, and that the attempt log is not among them', async () => {
    const r = await rea('retention', 'run', '--help');
    expect(r.code).toBe(0);
    expect(r.text.replace(/\s+/g, ' ')).toContain('run the retention rules once (events, events_archive, jobs by state, consumes, and with --module the tables its bus registers) and report what each removed; not the webhook attempt log, which the leader trims on its own (webhooks.attemptRetentionMs)');
  });

  it('names DATABASE_URL when the bad string came from the environment', async () => {
    vi.stubEnv('DATABASE_URL', `mysql://root:${SECRET}@127.0.0.1/test`);
    try {
      const r = await rea('status');
      expect(r.code).toBe(2);
      expect(r.text).toMatch(/invalid option DATABASE_URL: a mysql:\/\/ URL is not PostgreSQL/);
      expect(r.text).not.toContain(SECRET);
    } finally {
      vi.unstubAllEnvs();
    }
  });

  it('a PGlite directory that holds no database is an error for every command but migrate, and creates nothing', async () => {
    const dir = join(tmpdir(), `rea-typo-${process.pid}-${Date.now()}`);
    const r = await rea('status', '--pglite', dir);
    expect(r.code).toBe(2);
    expect(r.text).toContain(`invalid option --pglite: ${dir} holds no PGlite database (rea migrate --pglite ${dir} creates one)`);
    expect(existsSync(dir)).toBe(false);
  });

  it('a --pglite path that is a file is named as a file, not offered to rea migrate, and left as it was', async () => {
    const file = join(tmpdir(), `rea-file-${process.pid}-${Date.now()}`);
    writeFileSync(file, 'not a database');
    try {
      const r = await rea('status', '--pglite', file);
      expect(r.code).toBe(2);
      expect(r.text).toContain(`invalid option --pglite: ${file} is a file, not a PGlite data directory`);
      expect(r.text).not.toContain('rea migrate');
      expect(readFileSync(file, 'utf8')).toBe('not a database');
    } finally {
      rmSync(file, { force: true });
    }
  });

  it('with --json the error is JSON too: code, message and the flag at fault', async () => {
    const r = await rea('status', '--json', '--database-url', `mysql://root:${SECRET}@127.0.0.1/test`);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.text)).toEqual({
      error: { code: 'ERR_OPTIONS', field: '--database-url', message: expect.stringContaining('a mysql:// URL is not PostgreSQL') },
    });
    expect(r.text).not.toContain(SECRET);
    const down = await rea('status', '--json', '--database-url', 'postgres://postgres@127.0.0.1:1/x');
    expect(down.code).toBe(1);
    expect(JSON.parse(down.text).error).toMatchObject({ code: 'ERR_DATABASE', message: expect.stringMatching(/^cannot reach PostgreSQL at 127\.0\.0\.1:1\/x/) });
  });

  it('capture refuses a bad --schema or REA_SCHEMA as the other commands do: ERR_OPTIONS naming where it came from', async () => {
    const capture = ['capture', '--table', 't', '--subject', 'id', '--watch', 'a', '--type', 'x.y', '--json'];
    const message = "invalid option --schema: 'bad-name' is not a plain lower-case identifier (letters, digits, _; at most 63)";
    for (const command of [['status', '--database-url', 'postgres://postgres@127.0.0.1:1/x'], capture]) {
      const r = await rea(...command, '--json', '--schema', 'bad-name');
      expect({ command: command[0], code: r.code, error: JSON.parse(r.text).error }).toEqual({ command: command[0], code: 2, error: { code: 'ERR_OPTIONS', field: '--schema', message } });
    }
    vi.stubEnv('REA_SCHEMA', 'bad-name');
    try {
      const r = await rea(...capture);
      expect(r.code).toBe(2);
      expect(JSON.parse(r.text).error).toEqual({ code: 'ERR_OPTIONS', field: 'REA_SCHEMA', message: expect.stringContaining("invalid option REA_SCHEMA: 'bad-name'") });
    } finally {
      vi.unstubAllEnvs();
    }
  });

  it('with --json, commander\'s own usage errors are JSON too (and nothing else is printed)', async () => {
    const unknown = await rea('status', '--json', '--frobnicate');
    expect(unknown.code).toBe(2);
    expect(JSON.parse(unknown.text)).toEqual({ error: { code: 'ERR_USAGE', field: '--frobnicate', message: "unknown option '--frobnicate'" } });
    // Given as --flag=value, the field is the flag alone.
    const unknownWithValue = await rea('status', '--json', '--frobnicate=red');
    expect(JSON.parse(unknownWithValue.text).error).toMatchObject({ code: 'ERR_USAGE', field: '--frobnicate' });
    const bad = await rea('endpoints', 'attempts', '0190a8f2-0000-7000-8000-000000000000', '--json', '--limit', 'abc');
    expect(bad.code).toBe(2);
    expect(JSON.parse(bad.text).error).toEqual({ code: 'ERR_USAGE', field: '--limit', message: expect.stringContaining("argument 'abc' is invalid. must be a whole number from 1 to 500") });
    // Without --json the text stays as it was, with the help after it.
    const text = await rea('status', '--frobnicate');
    expect(text.text).toContain("error: unknown option '--frobnicate'");
    expect(text.text).toContain('Usage: rea status');
  });

  it('--database-url and --pglite together are refused rather than one silently winning', async () => {
    const r = await rea('status', '--database-url', PG_URL, '--pglite', tmpdir());
    expect(r.code).toBe(2);
    expect(r.text).toContain('invalid option --pglite: give --database-url or --pglite, not both');
  });

  it('malformed flags name the flag: --schema, --limit, --state, --grace-ms, an endpoint id, empty --events', async () => {
    const db = ['--database-url', PG_URL];
    const id = '0190a8f2-0000-7000-8000-000000000000';
    const cases: [string[], RegExp][] = [
      [['status', ...db, '--schema', 'Other'], /invalid option --schema: 'Other' is not a plain lower-case identifier/],
      [['endpoints', 'attempts', id, ...db, '--limit', 'abc'], /option '--limit <n>' argument 'abc' is invalid\. must be a whole number from 1 to 500/],
      [['endpoints', 'rotate', id, ...db, '--grace-ms', '-5'], /option '--grace-ms <ms>' argument '-5' is invalid\. must be a whole number ≥ 0/],
      [['endpoints', 'list', ...db, '--state', 'bogus'], /invalid option --state: must be one of enabled, failing, disabled, got 'bogus'/],
      // 30 February was taken as 2 March, and the message blamed --until.
      [['events', 'list', ...db, '--since', '2025-02-30', '--until', '2025-03-01'], /invalid option --since: must be a date or an ISO 8601 timestamp \(2025-01-31T12:00:00Z\) of a day that exists/],
      [['endpoints', 'enable', 'notauuid', ...db], /notauuid is not an endpoint id \(a UUID/],
      [['endpoints', 'add', 'https://example.com/hook', ...db, '--events', ' , '], /invalid option --events: give at least one event type or pattern/],
      [['run', 'x.js', '--stop-timeout', 'soon'], /option '--stop-timeout <ms>' argument 'soon' is invalid/],
      [['panel', ...db, '--no-auth', '--port', ' '], /invalid option --port: must be a port number from 0 to 65535 \(0 picks a free one\), got ' '/],
    ];
    for (const [args, message] of cases) {
      const r = await rea(...args);
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
      expect(r.text).toMatch(message);
    }
  });

  it('a job id or cursor above the bigint range is a usage error naming the flag or command, not an unexpected error', async () => {
    // 9999999999999999999 has 19 digits like a job id but is above 9223372036854775807: it passed
    // the digits-only check and failed in the database's cast (ERR_UNEXPECTED, exit 1).
    const db = ['--database-url', PG_URL, '--schema', freshSchema('ids')];
    const cases: [string[], RegExp][] = [
      [['jobs', 'list', ...db, '--cursor', '9999999999999999999'], /invalid option --cursor: must be the nextCursor of a previous page/],
      [['jobs', 'cancel', '9999999999999999999', ...db], /invalid option jobs cancel: 9999999999999999999 is not a job id \(a whole number from 1 to 9223372036854775807\)/],
      [['jobs', 'retry', '1', '9999999999999999999', ...db], /invalid option jobs retry: 9999999999999999999 is not a job id/],
    ];
    for (const [args, message] of cases) {
      const r = await rea(...args);
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
      expect(r.text).toMatch(message);
      expect(r.text).not.toContain('ERR_UNEXPECTED');
    }
    const json = await rea('jobs', 'list', ...db, '--cursor', '9999999999999999999', '--json');
    expect(JSON.parse(json.text).error).toMatchObject({ code: 'ERR_USAGE', field: '--cursor' });
  });

  it('a malformed value is ERR_USAGE naming the flag, whichever part of rea refused it', async () => {
    // --state and --kind were ERR_OPTIONS while --limit was ERR_USAGE; capture named its option
    // (watchColumns) and endpoints add the bus call's field (endpoints.create.eventTypes[1]).
    const db = ['--database-url', PG_URL, '--schema', freshSchema('usage')];
    const cases: [string[], string, RegExp][] = [
      [['events', 'list', ...db, '--state', 'bogus'], '--state', /must be one of unfanned, fanned, poisoned/],
      [['events', 'list', ...db, '--limit', '0'], '--limit', /must be a whole number from 1 to 500/],
      [['events', 'list', ...db, '--since', 'yesterday'], '--since', /ISO 8601/],
      [['jobs', 'list', ...db, '--state', 'bogus'], '--state', /must be one of available/],
      [['jobs', 'list', ...db, '--kind', 'bogus'], '--kind', /must be one of handler, webhook \(/],
      // Offered and accepted, it answered "no jobs match", as if rea forwarded to a broker and had
      // no such job now: nothing makes one yet.
      [['jobs', 'list', ...db, '--kind', 'forward'], '--kind', /^invalid option --kind: must be one of handler, webhook \(forwarding to a message broker is not built yet: no job has kind forward\)$/],
      [['jobs', 'list', ...db, '--event', 'nope'], '--event', /must be an event id/],
      [['endpoints', 'list', ...db, '--state', 'bogus'], '--state', /must be one of enabled, failing, disabled/],
      [['endpoints', 'add', 'https://hooks.example.com/in', ...db, '--events', 'order.*,a b'], '--events', /must be an event type or pattern .* \(item 2 of the list\)/],
      [['jobs', 'cancel', 'x1', ...db], 'jobs cancel', /x1 is not a job id/],
      [['capture', '--table', 'orders', '--subject', 'id', '--type', 'order.changed'], '--watch', /invalid option --watch: must name at least one column when UPDATE is captured/],
      [['capture', '--table', 'orders', '--subject', 'id', '--watch', 'a,a', '--type', 'x.y'], '--watch', /'a' is listed twice \(item 2 of the list\)/],
      // These named the library's options (eventType, eventTypes), which no flag is called.
      [['capture', '--table', 'orders', '--subject', 'id', '--watch', 'a'], '--type', /^invalid option --type: give --type <type>, or at least one of --insert, --update, --delete$/],
      [['capture', '--table', 'orders', '--subject', 'id', '--watch', 'a', '--type', 'x.y', '--delete', 'x.gone'], '--type', /^invalid option --type: give --type or --insert \/ --update \/ --delete, not both$/],
    ];
    for (const [args, field, message] of cases) {
      const r = await rea(...args, '--json');
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
      const { error } = JSON.parse(r.text);
      expect({ args, code: error.code, field: error.field }).toEqual({ args, code: 'ERR_USAGE', field });
      expect(error.message).toMatch(message);
    }
    // Database settings keep the documented OptionsError (above): a refused --database-url is ERR_OPTIONS.
  });

  it('events requeue with neither ids nor --poisoned is a usage error, not "requeued 0 events"', async () => {
    const r = await rea('events', 'requeue', '--database-url', PG_URL);
    expect(r.code).toBe(2);
    expect(r.text).toContain('give event ids or --poisoned');
    expect(r.text).not.toContain('requeued');
  });

  it('unknown commands and options exit 2 like rea\'s own usage errors; --version prints the version', async () => {
    expect((await rea('bogus')).code).toBe(2);
    expect((await rea('status', '--bogus')).code).toBe(2);
    const { version } = (await import('../package.json', { with: { type: 'json' } })).default;
    const v = await rea('--version');
    expect(v.code).toBe(0);
    expect(v.text.trim()).toBe(version);
  });

  it('a password percent-encoded as it should be is accepted, and a message names host and database only', () => {
    const url = `postgres://app:${encodeURIComponent(`/${SECRET}?#@`)}@127.0.0.1:5432/prod`;
    expect(() => checkConnectionString(url, 'database.postgres')).not.toThrow();
    expect(describeConnection(url)).toBe('PostgreSQL at 127.0.0.1:5432/prod (user app)');
  });

  it('createBus refuses a connection string pg would misread, with a typed error naming database.postgres', () => {
    for (const bad of ['notaurl', `mysql://root:${SECRET}@127.0.0.1/test`, `postgres://app:/${SECRET}@127.0.0.1:5432/prod`]) {
      let caught: unknown;
      try {
        createBus({ database: { postgres: bad }, events });
      } catch (err) {
        caught = err;
      }
      expect(caught).toBeInstanceOf(OptionsError);
      expect((caught as OptionsError).field).toBe('database.postgres');
      expect((caught as Error).message).not.toContain(SECRET);
    }
  });
});

describe('an error no mapping foresaw', () => {
  it('is one line with its name, exit 1, JSON with --json; no stack', async () => {
    const adminBus = await import('../src/cli/admin-bus.js');
    const bug = new TypeError("Cannot read properties of undefined (reading 'rows')");
    // Stand-in for a bug in a command; rea() restores every mock when it returns.
    vi.spyOn(adminBus, 'withAdminBus').mockRejectedValue(bug);
    expect(await rea('handlers', 'list', '--database-url', PG_URL)).toEqual({ code: 1, text: `rea: TypeError: ${bug.message} (REA_DEBUG=1 prints the stack)` });
    vi.spyOn(adminBus, 'withAdminBus').mockRejectedValue(bug);
    const j = await rea('handlers', 'list', '--json', '--database-url', PG_URL);
    expect(j.code).toBe(1);
    expect(JSON.parse(j.text)).toEqual({ error: { code: 'ERR_UNEXPECTED', message: `TypeError: ${bug.message}` } });

    // For a bug report, REA_DEBUG=1 adds the stack.
    vi.stubEnv('REA_DEBUG', '1');
    try {
      vi.spyOn(adminBus, 'withAdminBus').mockRejectedValue(bug);
      const d = await rea('handlers', 'list', '--database-url', PG_URL);
      expect(d.code).toBe(1);
      expect(d.text).toBe(`rea: TypeError: ${bug.message}\n${bug.stack}`);
    } finally {
      vi.unstubAllEnvs();
    }
  });
});

describe('a database that cannot be used', () => {
  it('unreachable: the CLI exits 1 naming the server without its password; the library throws DatabaseError', async () => {
    const url = `postgres://postgres:${SECRET}@127.0.0.1:1/shop`;
    const r = await rea('status', '--database-url', url);
    expect(r.code).toBe(1);
    expect(r.text).toMatch(/^rea: cannot reach PostgreSQL at 127\.0\.0\.1:1\/shop \(user postgres\): .*ECONNREFUSED/m);
    expect(r.text).not.toContain(SECRET);

    const bus = createBus({ database: { postgres: url, poolSize: 1 }, events });
    try {
      const err = await bus.migrate().then(() => null, (e: unknown) => e);
      expect(err).toBeInstanceOf(DatabaseError);
      expect(err).toBeInstanceOf(ReaError);
      expect(err).toMatchObject({ code: 'ERR_DATABASE', kind: 'unreachable' });
      expect((err as Error).message).not.toContain(SECRET);
      expect(bus.driver.isTransientError(err)).toBe(true); // rea run keeps waiting for it
    } finally {
      await bus.stop();
    }
  });

  it('a deadlock, a serialization failure or a cancelled statement stays what it is: the database was reached', () => {
    const bus = createBus({ database: { postgres: 'postgres://postgres@127.0.0.1:1/shop', poolSize: 1 }, events });
    for (const code of ['40P01', '40001', '57014', '55P03']) {
      const err = Object.assign(new Error(`server said ${code}`), { code });
      expect(bus.driver.explainError(err)).toBe(err);
      // Retried as they were by the relay and workers, except a cancelled statement (a
      // statement_timeout would cancel it again): that one is tried row by row.
      expect(bus.driver.isTransientError(err)).toBe(code !== '57014');
    }
    const lost = Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' });
    expect(bus.driver.explainError(lost)).toMatchObject({ code: 'ERR_DATABASE', kind: 'unreachable', cause: lost });
    return bus.stop();
  });

  it.skipIf(!postgresTarget.available)('refused: a database that does not exist is named, and is not worth waiting for', async () => {
    const url = new URL(PG_URL);
    url.pathname = '/rea_no_such_database';
    const r = await rea('status', '--database-url', url.toString());
    expect(r.code).toBe(1);
    expect(r.text).toMatch(/rea: PostgreSQL at .*\/rea_no_such_database .*refused the connection: database "rea_no_such_database" does not exist/);
    const bus = createBus({ database: { postgres: url.toString(), poolSize: 1 }, events });
    try {
      const err = await bus.migrate().then(() => null, (e: unknown) => e);
      expect(err).toMatchObject({ code: 'ERR_DATABASE', kind: 'refused' });
      expect(bus.driver.isTransientError(err)).toBe(false);
    } finally {
      await bus.stop();
    }
  });

  it.skipIf(!postgresTarget.available)('SSL asked of a server without it: one line naming the server and sslmode, not pg\'s bare message', async () => {
    const url = new URL(PG_URL);
    url.searchParams.set('sslmode', 'require');
    const r = await rea('status', '--database-url', url.toString());
    expect(r.code).toBe(1);
    expect(r.text).toMatch(/^rea: PostgreSQL at 127\.0\.0\.1:5432\/\S+ \(user postgres\) does not support SSL connections, and the connection string asks for SSL \(sslmode\)/m);
    expect(r.text).not.toMatch(/^The server does not support SSL connections$/m);
  });

  it('a TLS certificate the client refused is named as such, and is not worth waiting for', () => {
    const bus = createBus({ database: { postgres: 'postgres://postgres@db.example:5432/shop', poolSize: 1 }, events });
    const err = Object.assign(new Error('self-signed certificate in certificate chain'), { code: 'SELF_SIGNED_CERT_IN_CHAIN' });
    const explained = bus.driver.explainError(err);
    expect(explained).toMatchObject({ code: 'ERR_DATABASE', kind: 'refused', cause: err });
    expect((explained as Error).message).toMatch(/^PostgreSQL at db\.example:5432\/shop \(user postgres\): its TLS certificate was not accepted \(SELF_SIGNED_CERT_IN_CHAIN/);
    expect(bus.driver.isTransientError(explained)).toBe(false);
    return bus.stop();
  });

  it.skipIf(!postgresTarget.available)('capture --apply on a table, schema or column that does not exist names the flag, not "rea\'s tables are missing"', async () => {
    const schema = freshSchema();
    const db = ['--database-url', PG_URL, '--schema', schema];
    expect((await rea('migrate', ...db)).code).toBe(0);
    await postgresTarget.query(`create table ${schema}.capt (id int, a int)`);
    const capture = (table: string, ...more: string[]) => rea('capture', '--table', table, '--subject', 'id', '--type', 'x.changed', '--apply', ...db, ...more);
    const cases: [string[], string][] = [
      [['public.rea_no_such_table', '--watch', 'a'], 'rea: invalid option --table: table public.rea_no_such_table does not exist'],
      [['rea_no_such_schema.orders', '--watch', 'a'], 'rea: invalid option --table: table rea_no_such_schema.orders does not exist'],
      [[`${schema}.capt`, '--watch', 'b'], `rea: invalid option --watch: table ${schema}.capt has no column b`],
      [[`${schema}.capt`, '--watch', 'a', '--payload', 'a,c'], `rea: invalid option --payload: table ${schema}.capt has no column c`],
    ];
    for (const [[table, ...more], message] of cases) {
      const r = await capture(table!, ...more);
      expect({ message, code: r.code }).toEqual({ message, code: 2 });
      expect(r.text).toContain(message);
    }
    const ok = await capture(`${schema}.capt`, '--watch', 'a');
    expect(ok).toEqual({ code: 0, text: `capture trigger on ${schema}.capt applied` });
    // --json printed the same sentence: a script parsing it failed on a trigger that was applied.
    await postgresTarget.query(`create table ${schema}.capt2 (id int, a int)`);
    const json = await capture(`${schema}.capt2`, '--watch', 'a', '--json');
    expect(json.code).toBe(0);
    expect(JSON.parse(json.text)).toEqual({ applied: true, table: `${schema}.capt2`, up: expect.stringContaining('create'), down: expect.stringContaining('drop') });
    // A name another table's capture uses (the default of capt2 given again, for capt3).
    await postgresTarget.query(`create table ${schema}.capt3 (id int, b int)`);
    const taken = await capture(`${schema}.capt3`, '--watch', 'b', '--name', `capture_${schema}_capt2`);
    expect(taken.code).toBe(2);
    expect(taken.text).toContain(`rea: invalid option --name: capture function "${schema}"."capture_${schema}_capt2"() already serves the triggers of table ${schema}.capt2`);
    await postgresTarget.query(`drop schema ${schema} cascade`);
  });

  it.skipIf(!postgresTarget.available || !hasPsql)('capture: a failure half way leaves nothing behind, run by --apply or the printed script by psql', async () => {
    const schema = freshSchema();
    const db = ['--database-url', PG_URL, '--schema', schema];
    expect((await rea('migrate', ...db)).code).toBe(0);
    // A view passes the script's checks and gets its function, then refuses row triggers: a failure half way.
    await postgresTarget.query(`create table ${schema}.capt (id int, a int); create view ${schema}.capv as select id, a from ${schema}.capt`);
    const functions = async () => (await postgresTarget.query(`select proname from pg_proc where pronamespace = '${schema}'::regnamespace and proname like 'capture%'`)).map((r) => r.proname);
    const capture = (...more: string[]) => rea('capture', '--table', `${schema}.capv`, '--subject', 'id', '--watch', 'a', '--type', 'x.changed', ...db, ...more);
    const applied = await capture('--apply');
    expect(applied).toEqual({ code: 2, text: expect.stringContaining(`rea: invalid option --table: "capv" is a view`) });
    expect(await functions()).toEqual([]);
    // psql goes on past an error unless told to stop: statement by statement, the function stayed
    // behind without its triggers. The printed script is one transaction, so it all rolls back.
    const printed = await capture();
    expect(printed.code).toBe(0);
    const psql = spawnSync('psql', ['-X', '-q', '-d', PG_URL], { input: printed.text, encoding: 'utf8' });
    expect(psql.stderr).toContain('"capv" is a view');
    expect(await functions()).toEqual([]);
    expect(printed.text).toMatch(/^begin;\n[\s\S]*\ncommit;\n$/);
    // The same for the down script, and --json carries what would be printed.
    expect(JSON.parse((await capture('--json')).text)).toEqual({ up: printed.text, down: expect.stringMatching(/^begin;\n[\s\S]*\ncommit;\n$/) });
    // For a migration tool that runs each migration in a transaction of its own: the bare statements.
    const bare = await capture('--no-transaction');
    expect(bare.text).not.toMatch(/^(begin|commit);$/m);
    expect(`begin;\n${bare.text.trim()}\ncommit;\n`).toBe(printed.text);
    await postgresTarget.query(`drop schema ${schema} cascade`);
  });

  it.skipIf(!postgresTarget.available)('capture --apply refuses a second capture of a table under another name (each change would be recorded twice)', async () => {
    const schema = freshSchema();
    const db = ['--database-url', PG_URL, '--schema', schema];
    expect((await rea('migrate', ...db)).code).toBe(0);
    await postgresTarget.query(`create table ${schema}.capt (id int, a int)`);
    const capture = (...more: string[]) => rea('capture', '--table', `${schema}.capt`, '--subject', 'id', '--watch', 'a', '--type', 'x.changed', '--apply', ...db, ...more);
    expect((await capture()).code).toBe(0);
    const again = await capture('--name', 'capt_again');
    expect(again.code).toBe(2);
    expect(again.text).toContain(`rea: invalid option --name: table ${schema}.capt already has a rea capture, trigger capture_${schema}_capt_insert of function "${schema}".capture_${schema}_capt(); `
      + `a second one would record each change twice. Remove that capture first (rea capture --table ${schema}.capt --name capture_${schema}_capt --down --apply runs its down script)`);
    expect((await capture('--name', `capture_${schema}_capt`, '--down')).code).toBe(0);
    expect((await capture('--name', 'capt_again')).code).toBe(0);
    const triggers = await postgresTarget.query(`select tgname from pg_trigger where tgrelid = '${schema}.capt'::regclass and not tgisinternal order by tgname`);
    expect(triggers.map((t) => t.tgname)).toEqual(['capt_again_insert', 'capt_again_update']);
    await postgresTarget.query(`drop schema ${schema} cascade`);
  });

  // --down --apply ran the up script once (installing the trigger); then it said 'removed' of
  // whatever it was given: a table spelt without its schema (other default trigger names), one
  // never captured, one that does not exist. And it asked for an event type it had no use for.
  it.skipIf(!postgresTarget.available)('capture --down --apply removes the table\'s capture however the table is spelt, says what it removed, and refuses what has none', async () => {
    const schema = freshSchema();
    const db = ['--database-url', PG_URL, '--schema', schema];
    const table = `${schema}_capt`; // in public, so that it resolves unqualified too
    expect((await rea('migrate', ...db)).code).toBe(0);
    await postgresTarget.query(`create table public.${table} (id int, a int); create table ${schema}.plain (id int)`);
    try {
      const up = (spelt: string, ...more: string[]) => rea('capture', '--table', spelt, '--subject', 'id', '--watch', 'a', '--type', 'x.changed', '--apply', ...db, ...more);
      const down = (spelt: string, ...more: string[]) => rea('capture', '--table', spelt, '--down', '--apply', ...db, ...more);
      const installed = async () => {
        const triggers = await postgresTarget.query(`select tgname from pg_trigger where tgrelid = 'public.${table}'::regclass and not tgisinternal`);
        const functions = await postgresTarget.query(`select proname from pg_proc where pronamespace = '${schema}'::regnamespace and proname like 'capture%'`);
        return { triggers: triggers.length, functions: functions.length };
      };
      expect(await up(table)).toEqual({ code: 0, text: `capture trigger on ${table} applied` });
      expect(await installed()).toEqual({ triggers: 2, functions: 1 });
      expect(await down(`public.${table}`)).toEqual({
        code: 0,
        text: `capture on public.${table} removed: 2 triggers (capture_${table}_insert, capture_${table}_update) of function ${schema}.capture_${table}()`,
      });
      expect(await installed()).toEqual({ triggers: 0, functions: 0 });
      expect(await down(`public.${table}`)).toEqual({ code: 2, text: `rea: rea capture trigger on table public.${table} not found; nothing was removed` });
      expect(await down(`${schema}.plain`)).toEqual({ code: 2, text: `rea: rea capture trigger on table ${schema}.plain not found; nothing was removed` });
      expect(await down(`${schema}.nosuch`)).toEqual({ code: 2, text: expect.stringContaining(`rea: invalid option --table: table ${schema}.nosuch does not exist`) });

      // Only the capture of the name given; the JSON says what went.
      expect((await up(`public.${table}`)).code).toBe(0);
      expect(await down(table, '--name', 'other')).toEqual({ code: 2, text: `rea: rea capture trigger of name other on table ${table} not found; nothing was removed` });
      const json = await down(table, '--json');
      expect(json.code).toBe(0);
      expect(JSON.parse(json.text)).toEqual({
        removed: 2, triggers: [`capture_public_${table}_insert`, `capture_public_${table}_update`], functions: [`${schema}.capture_public_${table}()`],
        table, down: expect.stringMatching(/^begin;\ndo \$rea_down\$[\s\S]*\ncommit;\n$/),
      });
      expect(await installed()).toEqual({ triggers: 0, functions: 0 });
      // Printed, it needs no database either.
      const printed = await rea('capture', '--table', table, '--down', '--no-transaction');
      expect(printed).toMatchObject({ code: 0, text: expect.stringMatching(/^do \$rea_down\$/) });
    } finally {
      await postgresTarget.query(`drop table public.${table}; drop schema ${schema} cascade`);
    }
  });

  it.skipIf(!postgresTarget.available)('a role without privileges on rea\'s schema: one line naming the server and what was denied, as JSON too', async () => {
    const schema = freshSchema();
    const role = `${schema}_reader`;
    expect((await rea('migrate', '--database-url', PG_URL, '--schema', schema)).code).toBe(0);
    await postgresTarget.query(`create role ${role} login`);
    try {
      const url = new URL(PG_URL);
      url.username = role;
      const r = await rea('status', '--database-url', url.toString(), '--schema', schema);
      expect(r).toEqual({ code: 1, text: expect.stringMatching(new RegExp(`^rea: PostgreSQL at 127\\.0\\.0\\.1:5432/\\S+ \\(user ${role}\\) refused: permission denied for schema ${schema}$`)) });
      const j = await rea('status', '--json', '--database-url', url.toString(), '--schema', schema);
      expect(JSON.parse(j.text).error).toMatchObject({ code: 'ERR_DATABASE', message: expect.stringContaining(`refused: permission denied for schema ${schema}`) });
    } finally {
      await postgresTarget.query(`drop schema ${schema} cascade; drop role ${role}`);
    }
  });

  it.skipIf(!postgresTarget.available)('not migrated: status, overview() and start() say to run the migrations', async () => {
    const schema = freshSchema();
    const r = await rea('status', '--database-url', PG_URL, '--schema', schema);
    expect(r.code).toBe(1);
    expect(r.text).toContain(`rea: rea's tables are not in schema "${schema}" of PostgreSQL at`);
    expect(r.text).toContain('run the migrations first (rea migrate, or bus.migrate())');

    const bus = createBus({ database: { postgres: PG_URL, poolSize: 1 }, events, schema });
    bus.on('note.saved', 'noop', () => {});
    try {
      await expect(bus.overview()).rejects.toMatchObject({ code: 'ERR_DATABASE', kind: 'not-migrated' });
      await expect(bus.start()).rejects.toMatchObject({ code: 'ERR_DATABASE', kind: 'not-migrated' });
    } finally {
      await bus.stop();
    }
  });

  it.skipIf(!postgresTarget.available)('rea migrate on a schema a newer rea migrated: notes it, or refuses by name', async () => {
    const schema = freshSchema();
    try {
      expect(await rea('migrate', '--database-url', PG_URL, '--schema', schema)).toMatchObject({ code: 0 });
      await postgresTarget.query(`insert into ${schema}.migrations (version, name) values (${LATEST_MIGRATION + 1}, 'from_the_future')`);
      expect(await rea('migrate', '--database-url', PG_URL, '--schema', schema)).toEqual({
        code: 0,
        text: `already up to date\nnote: the schema also has migration ${LATEST_MIGRATION + 1} of a newer rea than this one; it runs against them, but upgrade it`,
      });
      const j = await rea('migrate', '--json', '--database-url', PG_URL, '--schema', schema);
      expect(JSON.parse(j.text)).toEqual({ applied: [], newer: [LATEST_MIGRATION + 1] });
      // A newer rea's migration this rea runs against passes the check; a breaking one fails it
      // (no alert holds here: an empty schema), while a plain status still reads it.
      expect((await rea('status', '--check', '--database-url', PG_URL, '--schema', schema)).code).toBe(0);
      await postgresTarget.query(`alter table ${schema}.migrations add column breaking boolean not null default false; update ${schema}.migrations set breaking = true where version = ${LATEST_MIGRATION + 1}`);
      expect((await rea('status', '--check', '--database-url', PG_URL, '--schema', schema)).code).toBe(1);
      expect((await rea('status', '--database-url', PG_URL, '--schema', schema)).code).toBe(0);
      const r = await rea('migrate', '--database-url', PG_URL, '--schema', schema);
      expect(r.code).toBe(1);
      expect(r.text).toMatch(new RegExp(`^rea: schema "${schema}" of PostgreSQL at \\S+ \\(user postgres\\) has migration ${LATEST_MIGRATION + 1} of a newer rea, which older versions must not run against`));
    } finally {
      await postgresTarget.query(`drop schema if exists ${schema} cascade`);
    }
  });

  it.skipIf(!postgresTarget.available)('a schema a newer rea marked breaking: every write of the CLI and the panel is refused as rea run is, reads go on', async () => {
    const schema = freshSchema();
    const db = ['--database-url', PG_URL, '--schema', schema];
    try {
      expect(await rea('migrate', ...db)).toMatchObject({ code: 0 });
      await postgresTarget.query(`insert into ${schema}.events (id, type, payload, fanned_out_at) values ('01900000-0000-7000-8000-000000000001', 'note.saved', '{}', now());
        insert into ${schema}.jobs (event_id, kind, target, state, attempt, max_attempts, lease_ms, finalized_at)
          values ('01900000-0000-7000-8000-000000000001', 'handler', 'mailer', 'discarded', 5, 5, 30000, now());
        alter table ${schema}.migrations add column breaking boolean not null default false;
        insert into ${schema}.migrations (version, name, breaking) values (${LATEST_MIGRATION + 1}, 'breaking_change', true)`);
      const refusal = new RegExp(`^rea: schema "${schema}" of PostgreSQL at \\S+ \\(user postgres\\) has migration ${LATEST_MIGRATION + 1} of a newer rea, which older versions must not run against`);
      for (const args of [['jobs', 'retry', '--discarded'], ['jobs', 'cancel', '1'], ['events', 'requeue', '--poisoned'],
        ['endpoints', 'add', 'https://hooks.example.com/x', '--events', 'note.*'], ['handlers', 'forget', 'mailer', '--force'], ['retention', 'run', '--defaults']]) {
        const r = await rea(...args, ...db);
        expect({ args, code: r.code, refused: refusal.test(r.text) }).toEqual({ args, code: 1, refused: true });
      }
      expect(await postgresTarget.query(`select state from ${schema}.jobs`)).toEqual([{ state: 'discarded' }]);
      expect(await postgresTarget.query(`select id from ${schema}.endpoints`)).toEqual([]);
      expect(await postgresTarget.query(`select name from ${schema}.handlers`)).toEqual([]);

      // Reads: what an operator needs during an incident.
      expect(await rea('jobs', 'list', ...db)).toMatchObject({ code: 0, text: expect.stringContaining('mailer') });
      expect(await rea('status', ...db)).toMatchObject({ code: 0 });

      // The panel reads; its buttons (the API's POSTs) are refused (the API names no server to its client).
      process.env.REA_TEST_PANEL_TOKEN = TOKEN;
      const said: string[] = [];
      vi.spyOn(console, 'error').mockImplementation((...m: unknown[]) => void said.push(m.join(' ')));
      const panel = await startPanel({ port: '0', host: '127.0.0.1', tokenEnv: 'REA_TEST_PANEL_TOKEN', databaseUrl: PG_URL, schema });
      expect(said.join('\n')).toContain(`rea panel: warning: schema "${schema}" has migration ${LATEST_MIGRATION + 1} of a newer rea`);
      try {
        expect((await call(panel.url, 'GET', '/api/jobs?state=discarded', { headers: bearer() })).status).toBe(200);
        const retry = await call(panel.url, 'POST', '/api/jobs/retry', { headers: bearer(), body: { state: 'discarded' } });
        expect(retry.status).toBe(503);
        expect(retry.json.error).toMatchObject({ code: 'ERR_DATABASE', message: 'a newer rea migrated this schema in a way this rea must not run against: upgrade it' });
      } finally {
        await panel.close();
        delete process.env.REA_TEST_PANEL_TOKEN;
      }
      expect(await postgresTarget.query(`select state from ${schema}.jobs`)).toEqual([{ state: 'discarded' }]);
    } finally {
      await postgresTarget.query(`drop schema if exists ${schema} cascade`);
    }
  });

  it.skipIf(!postgresTarget.available)('a schema behind: rea status says which migrations are pending, rea migrate --dry-run lists them and applies none', async () => {
    const schema = freshSchema();
    const db = ['--database-url', PG_URL, '--schema', schema];
    try {
      expect(await rea('migrate', ...db)).toMatchObject({ code: 0 });
      const [latest] = await postgresTarget.query<{ version: number; name: string }>(`select version, name from ${schema}.migrations order by version desc limit 1`);
      await postgresTarget.query(`alter table ${schema}.events drop column span_id, drop column trace_flags;
        alter table ${schema}.events_archive drop column span_id, drop column trace_flags;
        delete from ${schema}.migrations where version = ${latest!.version}`);
      const pending = `${latest!.version} ${latest!.name}`;

      const human = await rea('status', ...db);
      expect(human.code).toBe(0);
      expect(human.text.split('\n')[1]).toBe(`migrations 1 pending (${pending}): run rea migrate; until then a rea of this version fails to start, and its record() fails`);
      const json = JSON.parse((await rea('status', '--json', ...db)).text);
      expect(json.migrations).toEqual({ pending: [{ version: latest!.version, name: latest!.name }], newer: [], breaking: [], knownUpTo: LATEST_MIGRATION });
      // A probe on --check passed while every record() of this rea failed: no alert held.
      expect(json.alerts).toEqual([]);
      expect((await rea('status', '--check', ...db)).code).toBe(1);

      expect(await rea('migrate', '--dry-run', ...db)).toEqual({ code: 0, text: `would apply migrations ${latest!.version} (${latest!.name})` });
      expect(JSON.parse((await rea('migrate', '--dry-run', '--json', ...db)).text)).toEqual({ pending: [{ version: latest!.version, name: latest!.name }], newer: [], breaking: [] });
      expect(await postgresTarget.query(`select 1 from ${schema}.migrations where version = $1`, [latest!.version])).toEqual([]);

      await postgresTarget.query(`alter table ${schema}.events add column span_id text, add column trace_flags smallint;
        alter table ${schema}.events_archive add column span_id text, add column trace_flags smallint;
        insert into ${schema}.migrations (version, name) values (${latest!.version}, '${latest!.name}')`);
      expect((await rea('status', ...db)).text).not.toMatch(/^migrations /m);
      expect((await rea('status', '--check', ...db)).code).toBe(0);
      expect(JSON.parse((await rea('status', '--json', ...db)).text).migrations.pending).toEqual([]);
      expect(await rea('migrate', '--dry-run', ...db)).toEqual({ code: 0, text: 'already up to date' });
    } finally {
      await postgresTarget.query(`drop schema if exists ${schema} cascade`);
    }
  });

  // In its own process: pino writes to the file descriptor, which the in-process rea() above does not see.
  it.skipIf(!postgresTarget.available)('rea migrate --json prints one JSON document on stdout while rea logs a warning (to stderr)', async () => {
    const schema = freshSchema();
    try {
      expect(await rea('migrate', '--database-url', PG_URL, '--schema', schema)).toMatchObject({ code: 0 });
      await postgresTarget.query(`insert into ${schema}.migrations (version, name) values (${LATEST_MIGRATION + 1}, 'from_the_future')`);
      const cli = fileURLToPath(new URL('./fixtures/rea-cli.ts', import.meta.url));
      const { stdout, stderr } = await execFileAsync(process.execPath, ['--import', 'tsx', cli, 'migrate', '--json', '--database-url', PG_URL, '--schema', schema],
        { env: { ...process.env, REA_LOG_LEVEL: 'warn' } });
      expect(JSON.parse(stdout)).toEqual({ applied: [], newer: [LATEST_MIGRATION + 1] });
      expect(stderr).toContain('"msg":"a newer rea has migrated this schema');
    } finally {
      await postgresTarget.query(`drop schema if exists ${schema} cascade`);
    }
  });

  it.skipIf(!postgresTarget.available)('not migrated: record() says so, in bus.transaction and on the caller\'s client, and the business write rolls back', async () => {
    const schema = freshSchema();
    const bus = createBus({ database: { postgres: PG_URL, poolSize: 2 }, events, schema });
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    try {
      await client.query(`create schema ${schema}_app; create table ${schema}_app.notes (n int)`);
      const inBusTx = bus.transaction(async (tx) => {
        await tx.query(`insert into ${schema}_app.notes values (1)`);
        await bus.record(tx, 'note.saved', { n: 1 });
      });
      await expect(inBusTx).rejects.toBeInstanceOf(DatabaseError);
      await expect(inBusTx).rejects.toMatchObject({ kind: 'not-migrated', message: expect.stringContaining(`schema "${schema}"`) });

      await client.query('begin');
      await client.query(`insert into ${schema}_app.notes values (2)`);
      await expect(bus.record(client, 'note.saved', { n: 2 })).rejects.toMatchObject({ code: 'ERR_DATABASE', kind: 'not-migrated' });
      await client.query('rollback');
      expect((await client.query(`select count(*)::int as n from ${schema}_app.notes`)).rows).toEqual([{ n: 0 }]);
    } finally {
      await client.query(`drop schema if exists ${schema}_app cascade`);
      await client.end();
      await bus.stop();
    }
  });
});

describeTargets('start() on a schema that is not migrated, on $name', (target) => {
  const test = it.skipIf(!target.available);

  // Without handlers start() ran no statement of its own: it resolved, and the relay, the worker
  // and the leader election then logged "relation does not exist" on every poll.
  test('without handlers, start() rejects with not-migrated and nothing starts polling', async () => {
    const schema = freshSchema();
    const warnings: string[] = [];
    const logger = { debug() {}, info() {}, error() {}, warn: (_o: object, msg?: string) => void warnings.push(msg ?? ''), child: () => logger };
    const bus = createBus({ database: target.database(), events, schema, logger, relay: { minPollMs: 5, maxPollMs: 5 } });
    try {
      const err = await bus.start().then(() => null, (e: unknown) => e);
      expect(err).toBeInstanceOf(DatabaseError);
      expect(err).toMatchObject({ kind: 'not-migrated', message: expect.stringContaining(`schema "${schema}"`) });
      expect((err as Error).message).toContain('run the migrations first (rea migrate, or bus.migrate())');
      await new Promise((r) => setTimeout(r, 100));
      expect(warnings).toEqual([]);
    } finally {
      await bus.stop();
    }
  });

  // They rejected with pg's own 42P01 ("relation … does not exist"), where overview() and start() say not-migrated.
  test('the admin calls (events, jobs, handlers, endpoints, deliveries) reject with not-migrated too', async () => {
    const schema = freshSchema();
    const bus = createBus({ database: target.database(), events, schema });
    const id = '01900000-0000-7000-8000-000000000000';
    try {
      const calls: [string, () => Promise<unknown>][] = [
        ['events.list', () => bus.events.list()], ['events.get', () => bus.events.get(id)],
        ['events.requeue', () => bus.events.requeue({ poisoned: true })], ['events.attempts', () => bus.events.attempts(id)],
        ['jobs.list', () => bus.jobs.list()], ['jobs.forEvent', () => bus.jobs.forEvent(id)],
        ['jobs.retry', () => bus.jobs.retry({ state: 'discarded' })], ['jobs.cancel', () => bus.jobs.cancel(['1'])],
        ['handlers.list', () => bus.handlers.list()], ['endpoints.list', () => bus.endpoints.list()],
        ['endpoints.get', () => bus.endpoints.get(id)], ['deliveries.resend', () => bus.deliveries.resend('1')],
        // It rejected with the server's raw 42P01.
        ['retention.run', () => bus.retention.run()], ['retention.run dry', () => bus.retention.run({ dryRun: true })],
      ];
      for (const [name, call] of calls) {
        const err = await call().then(() => null, (e: unknown) => e);
        expect(err, name).toBeInstanceOf(DatabaseError);
        expect(err, name).toMatchObject({ kind: 'not-migrated', message: expect.stringContaining(`schema "${schema}"`) });
      }
    } finally {
      await bus.stop();
    }
  });

  test('a schema behind on migrations is named, with the ones it lacks, whether or not handlers are registered', async () => {
    const migrated = await testBus(target, events);
    // As if the latest migration had not run yet (its row is what the check reads).
    const [latest] = await target.query<{ version: number; name: string }>(`select version, name from "${migrated.schema}".migrations order by version desc limit 1`);
    await target.query(`delete from "${migrated.schema}".migrations where version = $1`, [latest!.version]);
    for (const withHandler of [false, true]) {
      const bus = createBus({ database: target.database(), events, schema: migrated.schema });
      if (withHandler) bus.on('note.saved', 'noop', () => {});
      try {
        await expect(bus.start()).rejects.toMatchObject({
          code: 'ERR_DATABASE', kind: 'not-migrated',
          message: expect.stringMatching(new RegExp(`^schema "${migrated.schema}" of .* lacks rea's migration ${latest!.version}: run the migrations first`)),
        });
      } finally {
        await bus.stop();
      }
    }
    await target.query(`insert into "${migrated.schema}".migrations (version, name) values ($1, $2)`, [latest!.version, latest!.name]);
    const bus = createBus({ database: target.database(), events, schema: migrated.schema });
    await bus.start();
    await bus.stop();
  });

  // A new app on a schema one migration behind: every record() failed with the server's raw
  // 'column "span_id" of relation "events" does not exist', naming no migration.
  test('a schema a migration behind: record() is not-migrated naming rea migrate; the application\'s own undefined column stays its own', async () => {
    const migrated = await testBus(target, events);
    const s = `"${migrated.schema}"`;
    await target.query(`alter table ${s}.events drop column span_id, drop column trace_flags;
      alter table ${s}.events_archive drop column span_id, drop column trace_flags;
      delete from ${s}.migrations where version = ${LATEST_MIGRATION}`);
    const bus = createBus({ database: target.database(), events, schema: migrated.schema });
    const notMigrated = { code: 'ERR_DATABASE', kind: 'not-migrated', message: expect.stringMatching(new RegExp(`^schema "${migrated.schema}" of .* lacks migrations of this rea \\(its statement failed: column "span_id" of relation "events" does not exist\\): run the migrations first \\(rea migrate, or bus.migrate\\(\\)\\)$`)) };
    try {
      await expect(bus.transaction((tx) => bus.record(tx, 'note.saved', { n: 1 }))).rejects.toMatchObject(notMigrated);
      await expect(bus.transaction((tx) => bus.recordMany(tx, [{ type: 'note.saved', payload: { n: 1 } }, { type: 'note.saved', payload: { n: 2 } }]))).rejects.toMatchObject(notMigrated);
      // Recorded after tx.raw was read: the insert goes out at once, not with COMMIT.
      await expect(bus.transaction(async (tx) => { void tx.raw; await bus.record(tx, 'note.saved', { n: 3 }); })).rejects.toMatchObject(notMigrated);
      // On the caller's own transaction.
      const pglite = (target.database() as { pglite?: { transaction: (fn: (tx: unknown) => Promise<unknown>) => Promise<unknown> } }).pglite;
      if (pglite) {
        await expect(pglite.transaction((tx) => bus.record(tx, 'note.saved', { n: 4 }))).rejects.toMatchObject(notMigrated);
      } else {
        const client = new pg.Client({ connectionString: PG_URL });
        await client.connect();
        try {
          await client.query('begin');
          await expect(bus.record(client, 'note.saved', { n: 4 })).rejects.toMatchObject(notMigrated);
          await client.query('rollback');
        } finally {
          await client.end();
        }
      }
      // rea's own reads (an admin call) meeting a column the schema lacks: not-migrated too, not the
      // server's raw 42703.
      await target.query(`alter table ${s}.endpoints drop column secret_hint`);
      await expect(bus.endpoints.list()).rejects.toMatchObject({ code: 'ERR_DATABASE', kind: 'not-migrated', message: expect.stringContaining('lacks migrations of this rea') });
      // The application's own statement: its error, with its code, untouched.
      const own = await bus.transaction(async (tx) => {
        await tx.query(`select no_such_column from ${s}.jobs`);
      }).then(() => null, (e: unknown) => e);
      expect(own).not.toBeInstanceOf(ReaError);
      expect(own).toMatchObject({ code: '42703' });
    } finally {
      await bus.stop();
    }
    expect(await target.query(`select count(*)::int as n from ${s}.events`)).toEqual([{ n: 0 }]);
  });

  // retention.run threw the server's raw 42703 where the other calls said not-migrated; a table of
  // the application's keeps its own error, as the application's statements do.
  test('retention.run on a schema behind: rea\'s own rules are not-migrated; a registered table\'s own error stays its own', async () => {
    const migrated = await testBus(target, events);
    const s = `"${migrated.schema}"`;
    const app = `${migrated.schema}_app`;
    await target.query(`create schema ${app}`);
    await target.query(`create table ${app}.visits (seen_at timestamptz not null)`);
    const bus = createBus({ database: target.database(), events, schema: migrated.schema });
    bus.retention.register({ table: `${app}.visits`, timeColumn: 'seen_at', olderThan: '1d' });
    try {
      expect((await bus.retention.run()).rules.map((r) => r.rule)).toContain(`app:${app}.visits`);
      // Its column renamed since the first pass checked it: the application's statement, the server's error.
      await target.query(`alter table ${app}.visits rename column seen_at to seen`);
      const own = await bus.retention.run().then(() => null, (e: unknown) => e);
      expect(own).not.toBeInstanceOf(ReaError);
      expect(own).toMatchObject({ code: '42703' });
      await target.query(`alter table ${app}.visits rename column seen to seen_at`);
      // One of rea's own rules meets a column its schema lacks.
      await target.query(`alter table ${s}.consumes drop column consumed_at`);
      for (const dryRun of [false, true]) {
        await expect(bus.retention.run({ dryRun })).rejects.toMatchObject({
          code: 'ERR_DATABASE', kind: 'not-migrated', message: expect.stringMatching(/lacks migrations of this rea \(its statement failed: column "?[a-z.]*consumed_at"? does not exist\)/),
        });
      }
    } finally {
      await bus.stop();
      await target.query(`drop schema if exists ${app} cascade`);
    }
  });

  test('a schema a newer rea migrated: warned about, or refused by name when a newer migration is marked breaking', async () => {
    const migrated = await testBus(target, events);
    const s = `"${migrated.schema}"`;
    const warnings: { o: Record<string, unknown>; msg: string }[] = [];
    const logger = { debug() {}, info() {}, error() {}, warn: (o: Record<string, unknown>, msg?: string) => void warnings.push({ o, msg: msg ?? '' }), child: () => logger };
    // A migration this rea does not ship, as a newer rea leaves it (before any marks one breaking).
    await target.query(`insert into ${s}.migrations (version, name) values (${LATEST_MIGRATION + 1}, 'from_the_future')`);
    const bus = createBus({ database: target.database(), events, schema: migrated.schema, logger });
    bus.on('note.saved', 'noop', () => {});
    try {
      expect(await bus.migrate()).toEqual({ applied: [], newer: [LATEST_MIGRATION + 1] });
      await bus.start();
      await bus.transaction((tx) => bus.record(tx, 'note.saved', { n: 1 }));
      const newerWarnings = warnings.filter((w) => w.msg.startsWith('a newer rea has migrated this schema'));
      expect(newerWarnings.map((w) => w.o)).toEqual([
        { schema: migrated.schema, newer_migrations: [LATEST_MIGRATION + 1], known_up_to: LATEST_MIGRATION },
        { schema: migrated.schema, newer_migrations: [LATEST_MIGRATION + 1], known_up_to: LATEST_MIGRATION },
      ]);
    } finally {
      await bus.stop();
    }

    // A later rea adds the column that marks a migration breaking; this rea refuses to start, or
    // to migrate, and names it.
    await target.query(`alter table ${s}.migrations add column breaking boolean not null default false`);
    await target.query(`insert into ${s}.migrations (version, name, breaking) values (${LATEST_MIGRATION + 2}, 'breaking_change', true)`);
    const events0 = (await target.query<{ n: number }>(`select count(*)::int as n from ${s}.events`))[0]!.n;
    const older = createBus({ database: target.database(), events, schema: migrated.schema, logger });
    older.on('note.saved', 'noop', () => {});
    try {
      await expect(older.start()).rejects.toBeInstanceOf(DatabaseError);
      await expect(older.migrate()).rejects.toMatchObject({ code: 'ERR_DATABASE', kind: 'too-new' });
      const err = await older.start().then(() => null, (e: unknown) => e as DatabaseError);
      expect(err!.message).toMatch(new RegExp(`^schema "${migrated.schema}" of .* has migration ${LATEST_MIGRATION + 2} of a newer rea, which older versions must not run against \\(this rea knows migrations up to ${LATEST_MIGRATION}\\): run a rea at least as new as the one that migrated it$`));
    } finally {
      await older.stop();
    }
    // Nothing stored was touched.
    expect((await target.query<{ n: number }>(`select count(*)::int as n from ${s}.events`))[0]!.n).toBe(events0);
    expect((await target.query<{ version: number }>(`select version from ${s}.migrations where version > $1 order by version`, [LATEST_MIGRATION])).map((r) => r.version))
      .toEqual([LATEST_MIGRATION + 1, LATEST_MIGRATION + 2]);
  });
});

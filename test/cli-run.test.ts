// `rea run`: a database that is down while workers start is waited for, not a crash; a signal
// during the wait stops the process cleanly; past --wait-for-database the error is reported.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer, type AddressInfo } from 'node:net';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { freshSchema, PG_URL, postgresTarget } from './helpers/db.js';

const cli = fileURLToPath(new URL('./fixtures/rea-cli.ts', import.meta.url));
const unreachable = fileURLToPath(new URL('./fixtures/unreachable-bus.ts', import.meta.url));
const serving = fileURLToPath(new URL('./fixtures/serving-bus.ts', import.meta.url));
const slow = fileURLToPath(new URL('./fixtures/slow-handler-bus.ts', import.meta.url));

function runCli(args: string[], env: NodeJS.ProcessEnv = {}) {
  const child = spawn(process.execPath, ['--import', 'tsx', cli, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const waitFor = (re: RegExp) =>
    new Promise<void>((resolve, reject) => {
      const check = () => (re.test(stderr) ? resolve() : undefined);
      child.stderr.on('data', check);
      child.on('exit', () => reject(new Error(`exited before printing ${re}: ${stderr}`)));
      check();
    });
  return { child, exited, waitFor, stderr: () => stderr };
}

describe('rea run start-up', () => {
  it('retries while the database is unreachable and stops cleanly on SIGTERM', async () => {
    const run = runCli(['run', unreachable, '--wait-for-database', '60000']);
    await run.waitFor(/rea: cannot reach PostgreSQL at 127\.0\.0\.1:\d+.*ECONNREFUSED.*; retrying in 250 ms/);
    await run.waitFor(/retrying in 500 ms/); // backing off, still alive
    run.child.kill('SIGTERM');
    expect(await run.exited).toBe(0);
    expect(run.stderr()).toContain('SIGTERM: stopping');
    expect(run.stderr()).not.toContain('rea: running');
  });

  it('gives up after --wait-for-database and exits non-zero with the reason', async () => {
    const run = runCli(['run', unreachable, '--wait-for-database', '600']);
    const code = await run.exited;
    expect(code).toBe(1);
    expect(run.stderr()).toMatch(/rea: cannot reach PostgreSQL at 127\.0\.0\.1:\d+.*ECONNREFUSED/);
  });
});

describe.skipIf(!postgresTarget.available)('rea run shutdown', () => {
  it('SIGTERM ends the process once the bus has stopped, even while the module holds it open (its own HTTP server)', async () => {
    const schema = freshSchema();
    try {
      const run = runCli(['run', serving, '--migrate'], { REA_FIXTURE_DATABASE_URL: PG_URL, REA_FIXTURE_SCHEMA: schema });
      await run.waitFor(/rea: running/);
      run.child.kill('SIGTERM');
      // rea's handler took the signal's place: without an exit of its own the server kept the process up for ever.
      const code = await Promise.race([run.exited, new Promise((r) => setTimeout(r, 15_000, 'still running 15 s after SIGTERM'))]);
      if (code !== 0) run.child.kill('SIGKILL');
      expect(code).toBe(0);
      expect(run.stderr()).toContain('SIGTERM: stopping');
    } finally {
      await postgresTarget.query(`drop schema if exists "${schema}" cascade`);
    }
  });

  it('a second SIGTERM while handlers run aborts them now: their jobs return to the queue, uncounted, and the process exits 0', async () => {
    // The first signal's handler was process.once: a second SIGTERM (or Ctrl-C) took the default
    // action and killed the process at once, leaving its jobs leased to it, here for an hour.
    const schema = freshSchema();
    try {
      const run = runCli(['run', slow, '--migrate', '--stop-timeout', '600000'], { REA_FIXTURE_DATABASE_URL: PG_URL, REA_FIXTURE_SCHEMA: schema });
      await run.waitFor(/rea: running/);
      await postgresTarget.query(`insert into "${schema}".events (id, type, payload) values (gen_random_uuid(), 'x.happened', '{}')`);
      await run.waitFor(/fixture: handler started/);
      run.child.kill('SIGTERM');
      await run.waitFor(/SIGTERM: stopping, waiting up to 600000 ms for running handlers/);
      run.child.kill('SIGTERM');
      const code = await Promise.race([run.exited, new Promise((r) => setTimeout(r, 15_000, 'still running 15 s after the second SIGTERM'))]);
      if (code !== 0) run.child.kill('SIGKILL');
      expect(code).toBe(0);
      expect(run.stderr()).toContain('(SIGTERM again aborts them now)');
      expect(run.stderr()).toContain('rea: SIGTERM again: aborting running handlers now (their jobs return to the queue)');
      const jobs = await postgresTarget.query(`select state, attempt, errors->0->>'name' as error from "${schema}".jobs`);
      expect(jobs).toEqual([{ state: 'retryable', attempt: 0, error: 'WorkerStoppingError' }]);
    } finally {
      await postgresTarget.query(`drop schema if exists "${schema}" cascade`);
    }
  });

  it('a newer rea\'s breaking migration under a running `rea run`: it stops and exits 1, saying to upgrade, even while the module holds the process open', async () => {
    // The bus takes no more work then (schema:too-new), and a process kept up doing nothing looked
    // healthy to its supervisor, for as long as it lived.
    const schema = freshSchema();
    try {
      const run = runCli(['run', serving, '--migrate'], { REA_FIXTURE_DATABASE_URL: PG_URL, REA_FIXTURE_SCHEMA: schema, REA_FIXTURE_MIGRATION_CHECK_MS: '100' });
      await run.waitFor(/rea: running/);
      const { version } = (await postgresTarget.query(`select max(version)::int as version from "${schema}".migrations`))[0] as { version: number };
      await postgresTarget.query(`alter table "${schema}".migrations add column breaking boolean not null default false`);
      await postgresTarget.query(`insert into "${schema}".migrations (version, name, breaking) values (${version + 1}, 'breaking_change', true)`);
      const code = await Promise.race([run.exited, new Promise((r) => setTimeout(r, 15_000, 'still running 15 s after the breaking migration'))]);
      if (code !== 1) run.child.kill('SIGKILL');
      expect(code).toBe(1);
      expect(run.stderr()).toMatch(new RegExp(`rea: .*migration ${version + 1} of a newer rea.*; stopping \\(exit 1\\): upgrade this process`));
    } finally {
      await postgresTarget.query(`drop schema if exists "${schema}" cascade`);
    }
  });

  it('a start that fails (the schema is not migrated) exits 1 with the reason, even while the module holds the process open', async () => {
    const run = runCli(['run', serving], { REA_FIXTURE_DATABASE_URL: PG_URL, REA_FIXTURE_SCHEMA: freshSchema() });
    const code = await Promise.race([run.exited, new Promise((r) => setTimeout(r, 15_000, 'still running 15 s after the failed start'))]);
    if (code !== 1) run.child.kill('SIGKILL');
    expect(code).toBe(1);
    expect(run.stderr()).toMatch(/rea: rea's tables are not in schema "t_[0-9a-f]+" .*: run the migrations first/);
  });
});

describe.skipIf(!postgresTarget.available)('rea run --admin-port', () => {
  const adminUrl = (stderr: string) => /rea: admin handler \(\/metrics, \/healthz, panel\) at (http:\/\/127\.0\.0\.1:\d+\/)/.exec(stderr)![1]!;

  it("serves /metrics with this process's handler durations, and /healthz, until the process stops", async () => {
    // A worker run by `rea run` had no HTTP at all: its handler durations and delivery counts,
    // which only the process that runs them can count, could not be scraped anywhere.
    const schema = freshSchema();
    const token = 'r'.repeat(40);
    try {
      const run = runCli(['run', serving, '--migrate', '--admin-port', '0', '--token-env', 'REA_TEST_RUN_TOKEN'], { REA_FIXTURE_DATABASE_URL: PG_URL, REA_FIXTURE_SCHEMA: schema, REA_TEST_RUN_TOKEN: token });
      await run.waitFor(/rea: running/);
      const url = adminUrl(run.stderr());
      expect(run.stderr()).not.toContain(token);
      expect((await fetch(new URL('metrics', url))).status).toBe(401);
      const done = `select count(*)::int as n from "${schema}".events where fanned_out_at is not null`;
      await postgresTarget.query(`insert into "${schema}".events (id, type, payload) values (gen_random_uuid(), 'x.happened', '{}')`);
      const scrape = async () => (await fetch(new URL('metrics', url), { headers: { authorization: `Bearer ${token}` } })).text();
      await vi.waitFor(async () => expect(await scrape()).toMatch(/rea_handler_duration_seconds_count\{handler="noop",kind="handler"\} 1/), { timeout: 10_000 });
      expect((await postgresTarget.query(done))[0]).toEqual({ n: 1 });
      const health = await fetch(new URL('healthz', url));
      expect(health.status).toBe(200); // public, for an orchestrator's probe
      run.child.kill('SIGTERM');
      expect(await run.exited).toBe(0);
      await expect(fetch(new URL('healthz', url))).rejects.toThrow();
    } finally {
      await postgresTarget.query(`drop schema if exists "${schema}" cascade`);
    }
  });

  it('without its token: a usage error naming --token-env before anything starts, exit 2', async () => {
    const run = runCli(['run', serving, '--admin-port', '0', '--token-env', 'REA_TEST_RUN_NO_TOKEN'], { REA_FIXTURE_DATABASE_URL: PG_URL, REA_FIXTURE_SCHEMA: freshSchema() });
    expect(await run.exited).toBe(2);
    expect(run.stderr()).toContain('rea: invalid option --token-env: set REA_TEST_RUN_NO_TOKEN to the admin token');
    expect(run.stderr()).not.toContain('rea: running');
  });

  it('a port in use is a usage error naming --admin-port, exit 2, nothing started', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as AddressInfo).port;
    try {
      const run = runCli(['run', serving, '--admin-port', String(port), '--no-auth'], { REA_FIXTURE_DATABASE_URL: PG_URL, REA_FIXTURE_SCHEMA: freshSchema() });
      const code = await Promise.race([run.exited, new Promise((r) => setTimeout(r, 15_000, 'still running 15 s later'))]);
      if (code !== 2) run.child.kill('SIGKILL');
      expect(code).toBe(2);
      expect(run.stderr()).toContain(`rea: invalid option --admin-port: port ${port} on 127.0.0.1 is already in use`);
      expect(run.stderr()).not.toContain('rea: running');
    } finally {
      await new Promise<void>((resolve) => taken.close(() => resolve()));
    }
  });
});

describe.skipIf(!postgresTarget.available)('rea retention run --module', () => {
  it('ends once its pass is reported, even while the module holds the process open (its own HTTP server)', async () => {
    // The README's way to apply a bus's retention from the CLI, with the same module `rea run` takes:
    // the module's server kept the process up for ever after the report was printed.
    const schema = freshSchema();
    try {
      await postgresTarget.query(`create schema "${schema}"`);
      const migrate = runCli(['migrate', '--database-url', PG_URL, '--schema', schema]);
      expect(await migrate.exited).toBe(0);
      const run = runCli(['retention', 'run', '--module', serving, '--dry-run'], { REA_FIXTURE_DATABASE_URL: PG_URL, REA_FIXTURE_SCHEMA: schema });
      let stdout = '';
      run.child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
      const code = await Promise.race([run.exited, new Promise((r) => setTimeout(r, 15_000, 'still running 15 s after its pass'))]);
      if (code !== 0) run.child.kill('SIGKILL');
      expect(code).toBe(0);
      expect(stdout).toContain('retention dry run: nothing was deleted');
    } finally {
      await postgresTarget.query(`drop schema if exists "${schema}" cascade`);
    }
  });

  it.each([
    ['--database-url', PG_URL],
    ['--pglite', 'memory://'],
    ['--schema', 'elsewhere'],
  ])('refuses %s, a database setting it would ignore: the pass runs where the module says, exit 2 naming the flag', async (flag, value) => {
    // They were accepted and silently ignored: the pass ran on the module's database and schema
    // (deleting there) while the command line named another.
    const run = runCli(['retention', 'run', '--module', serving, flag, value, '--json'], { REA_FIXTURE_DATABASE_URL: PG_URL, REA_FIXTURE_SCHEMA: freshSchema() });
    expect(await run.exited).toBe(2);
    const { error } = JSON.parse(run.stderr().trim()) as { error: { code: string; field: string; message: string } };
    expect(error).toMatchObject({ code: 'ERR_OPTIONS', field: flag });
    expect(error.message).toContain(`--module runs the pass on the database and schema of the bus ${serving} builds, not on the ones ${flag} names`);
  });

  it('a pass that fails (the schema is not migrated) exits 1 with the reason, even while the module holds the process open', async () => {
    const run = runCli(['retention', 'run', '--module', serving], { REA_FIXTURE_DATABASE_URL: PG_URL, REA_FIXTURE_SCHEMA: freshSchema() });
    const code = await Promise.race([run.exited, new Promise((r) => setTimeout(r, 15_000, 'still running 15 s after the failed pass'))]);
    if (code !== 1) run.child.kill('SIGKILL');
    expect(code).toBe(1);
  });
});

describe('rea run <module> that does not give a bus', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rea-run-module-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const file = (name: string, text: string) => {
    writeFileSync(join(dir, name), text);
    return join(dir, name);
  };

  it.each([
    ['a syntax error', 'syntax.mjs', 'export const bus = ;', /^rea: cannot load \S+syntax\.mjs: SyntaxError: Unexpected token ';' \(node --check \S+syntax\.mjs shows where\)$/],
    ['a throw while loading', 'throws.mjs', "\nthrow new Error('config missing');", /^rea: cannot load \S+throws\.mjs: it threw while loading: config missing \(at \S+throws\.mjs:2:7\)$/],
    ['a missing import', 'dep.mjs', "import 'rea-no-such-package'; export const bus = 1;", /^rea: cannot load \S+dep\.mjs: an import it makes is missing: Cannot find package 'rea-no-such-package'/],
    ['no bus among its exports', 'nothing.mjs', 'export const port = 1;', /^rea: cannot load \S+nothing\.mjs: export a bus created with createBus\(\) as `bus` or as the default export \(or a function returning one\); it exports port$/],
    ['a factory that throws', 'factory.mjs', "export default () => { throw new TypeError('no config'); };", /^rea: cannot load \S+factory\.mjs: its exported function threw: TypeError: no config$/],
  ])('%s: one line naming the file and the cause, exit 1, nothing started', async (_what, name, text, message) => {
    const run = runCli(['run', file(name, text)]);
    expect(await run.exited).toBe(1);
    expect(run.stderr().trim()).toMatch(message);
    expect(run.stderr().trim().split('\n')).toHaveLength(1);
  });

  it('a file that does not exist is a usage error naming it', async () => {
    const run = runCli(['run', join(dir, 'nope.mjs')]);
    expect(await run.exited).toBe(2);
    expect(run.stderr().trim()).toBe(`rea: invalid option run <module>: ${join(dir, 'nope.mjs')} does not exist`);
  });
});

// One process per PGlite data directory: rea locks the directory it opens (<dir>/rea.lock,
// holding its pid) and refuses a second opener, in another process or in this one, with
// DataDirLockedError. A lock whose process died is taken over; in-memory PGlite needs none.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { createBus, DatabaseError, DataDirLockedError, defineEvents, OptionsError, type Bus, type EventSchemas } from '../src/index.js';

const holder = fileURLToPath(new URL('./fixtures/pglite-holder.ts', import.meta.url));
const events = defineEvents({});

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'rea-lock-'));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function open(dir: string): Bus<EventSchemas> {
  const bus = createBus({ database: { pglite: dir }, events });
  cleanup.push(() => bus.stop());
  return bus;
}

/** A child process holding `dir` open; resolves once it has. */
async function holdInChild(dir: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', holder, dir], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, REA_LOG_LEVEL: 'silent' } });
  cleanup.push(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await once(child, 'exit');
    }
  });
  let out = '';
  let err = '';
  child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      if (/ready \d+/.test(out)) resolve();
    });
    child.once('exit', (code) => reject(new Error(`holder exited ${code} before it was ready: ${err}`)));
  });
  return child;
}

// A child process with its own PGlite (a few seconds to boot and migrate), then this process's:
// ~10 s on a quiet machine, three times that under the full suite's load.
const CHILD_TEST_MS = 90_000;

describe('PGlite data directory lock', () => {
  it('a directory another process has open is refused, naming the directory and that pid; free again once it closes', async () => {
    const dir = tempDir();
    const child = await holdInChild(dir);
    expect(readFileSync(join(dir, 'rea.lock'), 'utf8').trim()).toBe(String(child.pid));

    let refused: unknown;
    try {
      createBus({ database: { pglite: dir }, events });
    } catch (err) {
      refused = err;
    }
    expect(refused).toBeInstanceOf(DataDirLockedError);
    expect(refused).toBeInstanceOf(DatabaseError);
    expect(refused).toMatchObject({ code: 'ERR_DATABASE', kind: 'locked', directory: dir, pid: child.pid, lockFile: join(dir, 'rea.lock') });
    expect((refused as Error).message).toContain(dir);
    expect((refused as Error).message).toContain(`process ${child.pid}`);
    // Refused before opening anything: the holder's lock is untouched.
    expect(readFileSync(join(dir, 'rea.lock'), 'utf8').trim()).toBe(String(child.pid));

    // The holder stops its bus: the lock goes with it, and the directory (migrated by it) opens here.
    child.stdin!.end();
    await once(child, 'exit');
    expect(existsSync(join(dir, 'rea.lock'))).toBe(false);
    const bus = open(dir);
    expect(await bus.driver.query('select count(*)::int as n from rea.migrations')).toMatchObject({ rows: [{ n: expect.any(Number) }] });
    expect(readFileSync(join(dir, 'rea.lock'), 'utf8').trim()).toBe(String(process.pid));
    await bus.stop();
    expect(existsSync(join(dir, 'rea.lock'))).toBe(false);
  }, CHILD_TEST_MS);

  it('a lock left by a process killed with SIGKILL is taken over', async () => {
    const dir = tempDir();
    const child = await holdInChild(dir);
    child.kill('SIGKILL');
    await once(child, 'exit');
    expect(readFileSync(join(dir, 'rea.lock'), 'utf8').trim()).toBe(String(child.pid));

    const bus = open(dir);
    await bus.migrate();
    expect(readFileSync(join(dir, 'rea.lock'), 'utf8').trim()).toBe(String(process.pid));
    await bus.stop();
    expect(existsSync(join(dir, 'rea.lock'))).toBe(false);
  }, CHILD_TEST_MS);

  it('a lock holding this process\'s pid that this process never took (an earlier process with the same pid) is taken over; one it took is not', async () => {
    const dir = tempDir();
    // A container restarted: its process has the pid of the one that left the lock.
    writeFileSync(join(dir, 'rea.lock'), `${process.pid}\n`);
    const first = open(dir);
    await first.migrate();
    // A second bus of this process on the same directory would be a second PostgreSQL on its files.
    expect(() => createBus({ database: { pglite: dir }, events })).toThrow(DataDirLockedError);
    expect(() => createBus({ database: { pglite: `file://${dir}` }, events })).toThrow(/already open in this process/);
    await first.stop();
    const second = open(dir);
    await second.migrate();
    await second.stop();
  });

  it('a path that is a file (or lies under one) is OptionsError database.pglite naming it, not a bare fs error', () => {
    // Before, createBus threw Node's "EEXIST: file already exists, mkdir …" (ENOTDIR under a file).
    const file = join(tempDir(), 'data');
    writeFileSync(file, 'not a directory');
    for (const [given, named, problem] of [
      [file, file, 'is a file, not a directory'],
      [`file://${file}`, file, 'is a file, not a directory'],
      [join(file, 'sub'), join(file, 'sub'), 'a part of its path is a file'],
    ] as const) {
      const err = (() => { try { open(given); } catch (e) { return e; } })();
      expect(err).toBeInstanceOf(OptionsError);
      expect(err).toMatchObject({ code: 'ERR_OPTIONS', field: 'database.pglite' });
      expect((err as Error).message).toContain(named);
      expect((err as Error).message).toContain(problem);
      expect(((err as Error).cause as NodeJS.ErrnoException).code).toMatch(/^(EEXIST|ENOTDIR)$/);
    }
    expect(readFileSync(file, 'utf8')).toBe('not a directory');
  });

  it.skipIf(process.platform !== 'linux')('a path under a file system that refuses directories (/proc) is OptionsError database.pglite, at once', () => {
    // Node 20's mkdirSync(…, { recursive: true }) never returns there (100 % CPU): the CLI hung on
    // `--pglite /proc/nope/x`.
    const given = `/proc/rea-nope-${process.pid}/data`;
    const err = (() => { try { open(given); } catch (e) { return e; } })();
    expect(err).toBeInstanceOf(OptionsError);
    expect(err).toMatchObject({ code: 'ERR_OPTIONS', field: 'database.pglite' });
    expect((err as Error).message).toContain(given);
    expect((err as Error).message).toContain('(ENOENT)');
  });

  // root may write anywhere, so no permission refusal happens to test (the suite runs as root in CI).
  it.skipIf(process.getuid?.() === 0)('a directory this process may not write in is OptionsError database.pglite naming it', () => {
    const parent = tempDir();
    const closed = join(parent, 'closed');
    mkdirSync(closed);
    chmodSync(closed, 0o555);
    cleanup.push(() => chmodSync(closed, 0o755));
    for (const [given, act] of [[join(closed, 'data'), 'cannot create'], [closed, 'cannot write in']] as const) {
      const err = (() => { try { open(given); } catch (e) { return e; } })();
      expect(err).toBeInstanceOf(OptionsError);
      expect(err).toMatchObject({ field: 'database.pglite' });
      expect((err as Error).message).toContain(`${act} ${given}: permission denied`);
    }
    expect(readdirSync(closed)).toEqual([]);
  });

  it('a bus stopped before it used its directory (PGlite still loading) frees it, and the directory opens again', async () => {
    const dir = tempDir();
    const first = createBus({ database: { pglite: dir }, events });
    expect(readFileSync(join(dir, 'rea.lock'), 'utf8').trim()).toBe(String(process.pid));
    await first.stop();
    expect(existsSync(join(dir, 'rea.lock'))).toBe(false);
    const bus = open(dir);
    await bus.migrate();
    expect(await bus.driver.query('select count(*)::int as n from rea.migrations')).toMatchObject({ rows: [{ n: expect.any(Number) }] });
  }, CHILD_TEST_MS);

  it('in-memory PGlite takes no lock', async () => {
    const a = open('memory://');
    const b = open('memory://');
    await Promise.all([a.migrate(), b.migrate()]);
  });
});

// What importing rea loads. PGlite's module (~50 ms and ~6 MB to load) is imported by the driver
// that opens a PGlite database, and the admin panel's routes by the first admin handler, not with
// rea: a process on PostgreSQL that serves no panel loads neither.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const execFileAsync = promisify(execFile);
const fixture = fileURLToPath(new URL('./fixtures/module-loads.ts', import.meta.url));
const loadLog = fileURLToPath(new URL('./fixtures/load-log.mjs', import.meta.url));

/** The module URLs a child process loaded, importing rea (and opening a PGlite bus, or serving /healthz from an admin handler). */
async function loadedModules(mode?: 'pglite' | 'admin'): Promise<string[]> {
  const { stdout, stderr } = await execFileAsync(process.execPath, ['--import', 'tsx', '--import', loadLog, fixture, ...(mode ? [mode] : [])], {
    env: { ...process.env, REA_LOG_LEVEL: 'silent' },
  });
  expect(stdout).toBe('done\n');
  return stderr.split('\n').filter((l) => l.startsWith('load ')).map((l) => l.slice('load '.length));
}

const isPGlite = (url: string) => url.includes('/node_modules/@electric-sql/pglite/');
const isAdminRoute = (url: string) => url.includes('/src/admin/routes/');

describe('modules loaded with rea', () => {
  it('importing rea loads neither PGlite nor the admin routes; a bus on PGlite loads PGlite', async () => {
    const plain = await loadedModules();
    // The log is real: rea's own entry point and its driver for PostgreSQL are in it.
    expect(plain.some((u) => u.endsWith('/src/index.ts'))).toBe(true);
    expect(plain.some((u) => u.endsWith('/src/drivers/postgres/driver.ts'))).toBe(true);
    expect(plain.filter(isPGlite)).toEqual([]);
    expect(plain.filter(isAdminRoute)).toEqual([]);

    const withPGlite = await loadedModules('pglite');
    expect(withPGlite.filter(isPGlite).length).toBeGreaterThan(0);
  }, 60_000);

  it('an admin handler loads the routes, and serves them', async () => {
    const loaded = await loadedModules('admin');
    expect(loaded.filter(isAdminRoute).length).toBeGreaterThan(20);
  }, 60_000);
});

// What importing rea loads. PGlite's module (~50 ms and ~6 MB to load) is imported by the driver
// that opens a PGlite database, not with rea: a process on PostgreSQL never loads it.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const execFileAsync = promisify(execFile);
const fixture = fileURLToPath(new URL('./fixtures/module-loads.ts', import.meta.url));
const loadLog = fileURLToPath(new URL('./fixtures/load-log.mjs', import.meta.url));

/** The module URLs a child process loaded, importing rea (and, with 'pglite', opening a PGlite bus). */
async function loadedModules(mode?: 'pglite'): Promise<string[]> {
  const { stdout, stderr } = await execFileAsync(process.execPath, ['--import', 'tsx', '--import', loadLog, fixture, ...(mode ? [mode] : [])], {
    env: { ...process.env, REA_LOG_LEVEL: 'silent' },
  });
  expect(stdout).toBe('done\n');
  return stderr.split('\n').filter((l) => l.startsWith('load ')).map((l) => l.slice('load '.length));
}

const isPGlite = (url: string) => url.includes('/node_modules/@electric-sql/pglite/');

describe('modules loaded with rea', () => {
  it('importing rea loads no PGlite; a bus on PGlite loads it', async () => {
    const plain = await loadedModules();
    // The log is real: rea's own entry point and its driver for PostgreSQL are in it.
    expect(plain.some((u) => u.endsWith('/src/index.ts'))).toBe(true);
    expect(plain.some((u) => u.endsWith('/src/drivers/postgres/driver.ts'))).toBe(true);
    expect(plain.filter(isPGlite)).toEqual([]);

    const withPGlite = await loadedModules('pglite');
    expect(withPGlite.filter(isPGlite).length).toBeGreaterThan(0);
  }, 60_000);
});

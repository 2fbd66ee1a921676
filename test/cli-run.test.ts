// `rea run`: a database that is down while workers start is waited for, not a crash; a signal
// during the wait stops the process cleanly; past --wait-for-database the error is reported.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const cli = fileURLToPath(new URL('./fixtures/rea-cli.ts', import.meta.url));
const unreachable = fileURLToPath(new URL('./fixtures/unreachable-bus.ts', import.meta.url));

function runCli(args: string[]) {
  const child = spawn(process.execPath, ['--import', 'tsx', cli, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
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

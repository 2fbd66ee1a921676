// `rea demo` as a separate process, the way `npm run demo` runs it: numeric flags are checked
// before anything starts (usage error naming the flag, exit 2), a panel port in use fails before
// the run with the port and the flag named, the temporary data directory never outlives the run,
// and the summary's "discarded" names what was actually discarded, or nothing.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it, vi, type TestContext } from 'vitest';
import { main } from '../src/cli/main.js';

const cli = fileURLToPath(new URL('./fixtures/rea-cli.ts', import.meta.url));

/** The demo with its own TMPDIR, so the data directories this run leaves (or not) are its own. */
function demo({ onTestFinished }: TestContext, args: string[]) {
  const tmp = mkdtempSync(join(tmpdir(), 'rea-demo-cli-test-tmp-'));
  const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: tmp };
  delete env.REA_ADMIN_TOKEN;
  const child = spawn(process.execPath, ['--import', 'tsx', cli, 'demo', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  // A test that failed while the demo was still running (--keep-running) must not leave it behind.
  onTestFinished(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
    rmSync(tmp, { recursive: true, force: true });
  });
  const waitForOutput = (re: RegExp) =>
    new Promise<RegExpMatchArray>((resolve, reject) => {
      const check = () => {
        const m = stdout.match(re);
        if (m) resolve(m);
      };
      child.stdout.on('data', check);
      child.on('close', () => reject(new Error(`exited before printing ${re}:\n${stdout}\n${stderr}`)));
      check();
    });
  return {
    child, exited, waitForOutput,
    stdout: () => stdout,
    stderr: () => stderr,
    /** The rea-demo-* data directories in this run's TMPDIR. */
    dataDirs: () => readdirSync(tmp).filter((name) => name.startsWith('rea-demo-')),
  };
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const summaryLine = (stdout: string) => stdout.split('\n').find((l) => l.startsWith('  jobs completed '));

/** `rea demo …` in this process, as cli-ops.test.ts runs commands: stdout, stderr and the exit code. */
async function demoInProcess(args: string[]): Promise<{ code: number; stdout: string; stderr: string; dataDirs: string[] }> {
  const tmp = mkdtempSync(join(tmpdir(), 'rea-demo-cli-test-tmp-'));
  vi.stubEnv('TMPDIR', tmp); // os.tmpdir() reads it on every call
  let stdout = '';
  const errors: string[] = [];
  const write = vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => ((stdout += String(s)), true));
  const error = vi.spyOn(console, 'error').mockImplementation((...m: unknown[]) => void errors.push(m.join(' ')));
  const before = process.exitCode;
  process.exitCode = undefined;
  try {
    await main(['node', 'rea', 'demo', ...args]);
    return { code: Number(process.exitCode ?? 0), stdout, stderr: errors.join('\n'), dataDirs: readdirSync(tmp).filter((n) => n.startsWith('rea-demo-')) };
  } finally {
    process.exitCode = before;
    write.mockRestore();
    error.mockRestore();
    vi.unstubAllEnvs();
    rmSync(tmp, { recursive: true, force: true });
  }
}

describe('rea demo flags', () => {
  it.each([
    ['--orders', 'abc'],
    ['--orders', '0'],
    ['--orders', '2.5'],
    ['--rate', '0'],
    ['--rate', 'abc'],
    ['--rate', '-5'],
    ['--panel-port', 'abc'],
    ['--panel-port', '65536'],
  ])('%s %s is a usage error naming the flag, before anything starts', async (flag, value) => {
    const run = await demoInProcess([flag, value]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(new RegExp(`^rea: invalid option ${escape(flag)}: .+, got '${escape(value)}'$`));
    expect(run.stdout).toBe(''); // nothing started: not even the data directory line
    expect(run.dataDirs).toEqual([]);
  });

  // The panel took REA_ADMIN_TOKEN only after the whole run: a token with a secret file's newline
  // (which no client can send) or a short one failed then, named as the option auth.token.
  it('--keep-running with an unusable REA_ADMIN_TOKEN is refused before anything starts, naming the variable', async () => {
    vi.stubEnv('REA_ADMIN_TOKEN', 'a-token-of-enough-length-0123\n');
    const run = await demoInProcess(['--keep-running', '--panel-port', '0', '--orders', '1']);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/^rea: invalid option REA_ADMIN_TOKEN: holds whitespace/);
    expect(run.stdout).toBe('');
    expect(run.dataDirs).toEqual([]);
  });
});

// Each of these is its own process (PGlite's start-up dominates the few seconds), so they run side by side.
// Whole demos run side by side here (concurrent), each ~10 s alone and two to three times that
// beside the other test files on two cores: 60 s each, not the 30 s default.
describe.concurrent('rea demo runs', { timeout: 60_000 }, () => {
  it('a panel port in use fails before the run, naming the port and the flag, and leaves no data directory', async (ctx) => {
    const { expect, onTestFinished } = ctx;
    const squatter = createServer();
    await new Promise<void>((resolve) => squatter.listen(0, '127.0.0.1', resolve));
    onTestFinished(() => new Promise<void>((resolve) => squatter.close(() => resolve())));
    const { port } = squatter.address() as AddressInfo;

    const run = demo(ctx, ['--keep-running', '--panel-port', String(port), '--orders', '1', '--rate', '100']);
    expect(await run.exited).toBe(2);
    expect(run.stderr()).toMatch(new RegExp(`^rea: invalid option --panel-port: port ${port} on 127\\.0\\.0\\.1 is already in use`, 'm'));
    expect(run.stderr()).not.toContain('EADDRINUSE');
    expect(run.stdout()).not.toContain('rea demo:'); // nothing was started
    expect(run.dataDirs()).toEqual([]);
  });

  it('a connection to the reserved panel port during the run is closed, and does not hold the panel back', async (ctx) => {
    const { expect } = ctx;
    const port = await freePortOutsideEphemeralRange();

    const run = demo(ctx, ['--keep-running', '--panel-port', String(port), '--orders', '10', '--rate', '20']);
    await run.waitForOutput(/^rea demo: /m); // the port is reserved from here on
    const early = connect(port, '127.0.0.1');
    const closed = new Promise<void>((resolve) => early.on('close', () => resolve()));
    early.on('error', () => {});
    ctx.onTestFinished(() => void early.destroy());
    await closed; // the early visitor is told no at once, not left hanging
    const [, url] = await run.waitForOutput(/admin panel: (http:\/\/127\.0\.0\.1:\d+\/)/);
    expect(url).toBe(`http://127.0.0.1:${port}/`);
    expect((await fetch(new URL('healthz', url!))).status).toBe(200);
    run.child.kill('SIGINT');
    expect(await run.exited).toBe(0);
  }, 60_000); // without the fix it waits for the early connection forever

  it('names the discarded job from what happened: order ORD-0013, its SMS handler and its error; says it is on purpose and that the database is gone', async (ctx) => {
    const { expect } = ctx;
    const run = demo(ctx, ['--orders', '13', '--rate', '200']);
    expect(await run.exited).toBe(0);
    expect(summaryLine(run.stdout())).toMatch(/^ {2}jobs completed \d+, retried \d+, discarded 1 \(order ORD-0013, sms: SMS provider: invalid phone number\)$/);
    expect(run.dataDirs()).toEqual([]);
    // The overview's alert says to run rea jobs retry --discarded, which then found no database:
    // the summary says the discard is the demo's, and that its database is gone.
    expect(run.stdout()).toContain('rea jobs retry --discarded');
    expect(run.stdout()).toContain("\nthe discard is on purpose: order ORD-0013's SMS fails for good (invalid phone number), to show one\n"
      + "this run's database is a temporary directory, removed as the demo exits: the alert's command has nothing left to act on;\n"
      + 'run rea demo --keep-running to retry the discarded job from the admin panel\n');
  });

  it('with nothing discarded the summary claims no discard; --keep-running serves the panel until Ctrl-C, then removes the data directory', async (ctx) => {
    const { expect } = ctx;
    const run = demo(ctx, ['--keep-running', '--panel-port', '0', '--orders', '5', '--rate', '200']);
    const [, url] = await run.waitForOutput(/admin panel: (http:\/\/127\.0\.0\.1:\d+\/)/);
    // Orders 1–5: no SMS fails, so nothing is discarded and no order is named.
    expect(summaryLine(run.stdout())).toMatch(/^ {2}jobs completed \d+, retried 0, discarded 0$/);
    expect(run.stdout()).not.toContain('ORD-');
    expect(run.dataDirs()).toHaveLength(1); // kept while running
    const health = await fetch(new URL('healthz', url!));
    expect(health.status).toBe(200);
    run.child.kill('SIGINT');
    expect(await run.exited).toBe(0);
    expect(run.dataDirs()).toEqual([]);
  });
});

/**
 * A port that is free now, below the kernel's ephemeral range (32768–60999 on Linux): a port
 * found by listening on 0 comes from that range, where every other test's port-0 server takes
 * its ports, and one of them took it between the probe and the demo's bind once.
 */
async function freePortOutsideEphemeralRange(): Promise<number> {
  for (let tries = 0; tries < 50; tries++) {
    const port = 20_000 + Math.floor(Math.random() * 10_000);
    const probe = createServer();
    const free = await new Promise<boolean>((resolve) => {
      probe.once('error', () => resolve(false));
      probe.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (free) {
      await new Promise<void>((resolve) => probe.close(() => resolve()));
      return port;
    }
  }
  throw new Error('no free port in 20000–29999');
}

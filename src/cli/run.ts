// rea run <module>: start the bus a module exports, and stop it gracefully on SIGINT/SIGTERM.
import { existsSync } from 'node:fs';
import { extname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Command } from 'commander';
import type { Bus } from '../bus.js';
import { DatabaseError, ModuleLoadError, OptionsError } from '../core/errors.js';
import { namedMessage } from '../core/errors-format.js';
import { MAX_TIMER_MS } from '../core/options.js';
import { adminServeSettings, listenError, servePanel, type AdminServeFlags } from './panel.js';
import { EXIT_FAILED } from './exit-codes.js';
import { checkPort, wholeNumber } from './settings.js';

interface RunFlags extends AdminServeFlags {
  migrate?: boolean;
  stopTimeout: number;
  waitForDatabase: number;
  adminPort?: string;
}

/** How long `rea run` lets the process end on its own once the bus has stopped (or failed to start). */
const EXIT_AFTER_STOP_MS = 1000;

/** rea's own code (dist/, or src/ when run from source): not where a user's module threw. */
const REA_CODE = new URL('..', import.meta.url).href;

export function runCommand(): Command {
  return new Command('run')
    .description('run the relay, workers and maintenance of the bus exported by <module> (export `bus`, or a default export)')
    .argument('<module>', 'path to a module exporting a bus (or a function returning one)')
    .option('--migrate', 'run migrations before starting')
    .option('--stop-timeout <ms>', 'how long running handlers get to finish on shutdown', wholeNumber(0, MAX_TIMER_MS), 10_000)
    .option('--wait-for-database <ms>', 'keep retrying while the database is unreachable at start-up', wholeNumber(0), 120_000)
    .option('--admin-port <n>', "serve rea's admin handler from this process: /metrics (with this process's handler durations and webhook deliveries), /healthz, the panel and HTTP API; off unless given")
    .option('--host <address>', 'address --admin-port binds', '127.0.0.1')
    .option('--token-env <name>', 'environment variable holding the admin token for --admin-port', 'REA_ADMIN_TOKEN')
    .option('--no-auth', 'serve --admin-port without credentials (loopback addresses only)')
    .option('--allowed-origin <origins>', "comma-separated origins --admin-port's panel is reached at through a proxy that rewrites Host", (v: string) => v.split(',').map((s) => s.trim()).filter(Boolean))
    .action(async (modulePath: string, flags: RunFlags) => {
      // Checked before the module loads, so a missing token or a bad port is said at once.
      const admin = flags.adminPort === undefined ? undefined : { port: checkPort('--admin-port', flags.adminPort), ...adminServeSettings(flags, '--host') };
      const bus = await loadBus(modulePath);
      // Bound before start-up, so a port in use is said at once, and /healthz answers (503 while
      // the database is unreachable) during --wait-for-database.
      const served = admin && await servePanel(bus, { ...admin, host: flags.host })
        .catch(async (err: unknown) => {
          await bus.stop().catch(() => {});
          exitSoon();
          throw listenError(err, { host: flags.host, port: admin.port, flag: '--admin-port' });
        });
      if (served) console.error(`rea: admin handler (/metrics, /healthz, panel) at ${served.url}${admin!.auth === 'none' ? ' (no auth: loopback only)' : ''}`);
      let stopping: string | undefined;
      const stopped = new Promise<void>((done) => {
        const stop = async (signal: string) => {
          if (stopping !== undefined) {
            // Handled, not left to the default action: a second Ctrl-C (or SIGTERM) killed the
            // process at once, and its running jobs stayed leased to it until their timeouts
            // (up to 24 h) ran out. Now it aborts them: they return to the queue at once.
            console.error(`rea: ${signal} again: aborting running handlers now (their jobs return to the queue); SIGKILL ends the process at once`);
            await bus.stop({ timeoutMs: 0 });
            return;
          }
          stopping = signal;
          console.error(`rea: ${signal}: stopping, waiting up to ${flags.stopTimeout} ms for running handlers (${signal} again aborts them now)`);
          await bus.stop({ timeoutMs: flags.stopTimeout });
          done();
        };
        process.on('SIGINT', () => void stop('SIGINT'));
        process.on('SIGTERM', () => void stop('SIGTERM'));
        // A newer rea's breaking migration: the bus takes no more work, and a process kept up doing
        // nothing looks healthy to its supervisor. It stops and exits 1, so the old version's
        // restarts fail loudly (start() refuses the schema) until it is upgraded.
        bus.lifecycle.on('schema:too-new', ({ error }) => {
          if (stopping !== undefined) return;
          stopping = 'schema:too-new';
          process.exitCode = EXIT_FAILED;
          console.error(`rea: ${error.message}; stopping (exit 1): upgrade this process to a rea at least as new as the one that migrated the schema`);
          void bus.stop({ timeoutMs: flags.stopTimeout }).finally(done);
        });
      });
      // A database that restarts while workers come up (a deploy, a failover) is not a reason to
      // exit: retry start-up for a while, as the running bus itself rides out lost connections.
      try {
        const started = await untilReachable(bus, flags.waitForDatabase, () => stopping !== undefined, async () => {
          if (flags.migrate) await bus.migrate();
          await bus.start();
        }).catch(async (err: unknown) => {
          await bus.stop().catch(() => {});
          throw err;
        });
        // A signal during start-up: bus.stop() lets the start finish, then stops what it started.
        if (started && stopping === undefined) console.error(`rea: running (${bus.instanceId}, schema ${bus.schema}); Ctrl-C stops`);
        await stopped;
      } finally {
        await served?.close();
        // rea's handlers took the signals' place, so a signal no longer ends the process: the
        // module may still hold it open (its own HTTP server, an interval), and a SIGTERM from a
        // process manager, or a start-up that failed, would then wait for a SIGKILL. Let the
        // process end on its own if it can, else end it (with the exit code main() has set).
        exitSoon();
      }
    });
}

/**
 * For a command that ran an application's module: let the process end on its own once rea is done,
 * or end it (with the exit code main() has set) if the module holds it open (its own HTTP server,
 * an interval) and would keep it up for ever.
 */
export function exitSoon(): void {
  setTimeout(() => process.exit(), EXIT_AFTER_STOP_MS).unref();
}

async function untilReachable(bus: Bus<any>, waitMs: number, cancelled: () => boolean, fn: () => Promise<void>): Promise<boolean> {
  const until = Date.now() + waitMs;
  let delay = 250;
  for (;;) {
    if (cancelled()) return false;
    try {
      await fn();
      return true;
    } catch (err) {
      if (cancelled()) return false;
      const explained = bus.driver.explainError(err);
      // A pooler that rea was not told of is transient to the loops (nothing is wrong with the
      // events), but no wait for the database mends it: said at once, not after --wait-for-database.
      const misconfigured = explained instanceof DatabaseError && explained.kind === 'pooler';
      if (!bus.driver.isTransientError(err) || misconfigured || Date.now() + delay > until) throw explained;
      console.error(`rea: ${(explained as Error).message}; retrying in ${delay} ms`);
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(5000, delay * 2);
    }
  }
}

/**
 * The bus `modulePath` exports (as `bus` or default, or a function returning one). A missing file
 * names the flag (`field`); a module that does not load, throws while loading or exports no bus
 * is a ModuleLoadError naming the file and the cause, never a bare stack.
 */
export async function loadBus(modulePath: string, field = 'run <module>'): Promise<Bus<any>> {
  const path = resolve(modulePath);
  if (!existsSync(path)) throw new OptionsError(field, `${modulePath} does not exist${path === modulePath ? '' : ` (looked for ${path})`}`);
  let mod: Record<string, unknown>;
  try {
    mod = await import(pathToFileURL(path).href);
  } catch (err) {
    throw new ModuleLoadError(modulePath, importProblem(err, modulePath), { cause: err });
  }
  let candidate = mod.bus ?? mod.default;
  if (typeof candidate === 'function') {
    try {
      candidate = await candidate();
    } catch (err) {
      throw new ModuleLoadError(modulePath, `its exported function threw: ${namedMessage(err)}`, { cause: err });
    }
  }
  if (!isBus(candidate)) {
    const names = Object.keys(mod);
    const found = names.length === 0 ? 'it exports nothing' : `it exports ${names.join(', ')}${mod.bus ?? mod.default ? ', and that is not a bus' : ''}`;
    throw new ModuleLoadError(modulePath, `export a bus created with createBus() as \`bus\` or as the default export (or a function returning one); ${found}`);
  }
  return candidate;
}

function isBus(x: unknown): x is Bus<any> {
  return typeof x === 'object' && x !== null && typeof (x as Bus<any>).start === 'function' && typeof (x as Bus<any>).record === 'function';
}

/** Why import() failed, in the words a user can act on; where it threw when the stack says so. */
function importProblem(err: unknown, modulePath: string): string {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'ERR_UNKNOWN_FILE_EXTENSION') return `node cannot import ${extname(modulePath)} files by itself; compile it, or run rea with a loader (node --import tsx node_modules/.bin/rea …)`;
  if (code === 'ERR_MODULE_NOT_FOUND' || code === 'ERR_PACKAGE_PATH_NOT_EXPORTED') return `an import it makes is missing: ${namedMessage(err)}`;
  if (err instanceof SyntaxError) return `${namedMessage(err)} (node --check ${modulePath} shows where)`;
  // Where it threw: the first stack frame in the user's files (not a dependency's, not rea's own).
  const frame = String((err as Error | undefined)?.stack ?? '').split('\n')
    .map((line) => /(file:\/\/[^\s()]+):(\d+):(\d+)\)?$/.exec(line.trim()))
    .find((m) => m !== null && !m[1]!.includes('/node_modules/') && !m[1]!.startsWith(REA_CODE));
  const where = frame ? ` (at ${fileURLToPath(frame[1]!)}:${frame[2]}:${frame[3]})` : '';
  return `it threw while loading: ${namedMessage(err)}${where}`;
}

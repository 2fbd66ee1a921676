// rea run <module>: start the bus a module exports, and stop it gracefully on SIGINT/SIGTERM.
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Command } from 'commander';
import type { Bus } from '../bus.js';
import { OptionsError } from '../core/errors.js';
import { wholeNumber } from './settings.js';

export function runCommand(): Command {
  return new Command('run')
    .description('run the relay, workers and maintenance of the bus exported by <module> (export `bus`, or a default export)')
    .argument('<module>', 'path to a module exporting a bus (or a function returning one)')
    .option('--migrate', 'run migrations before starting')
    .option('--stop-timeout <ms>', 'how long running handlers get to finish on shutdown', wholeNumber(0), 10_000)
    .option('--wait-for-database <ms>', 'keep retrying while the database is unreachable at start-up', wholeNumber(0), 120_000)
    .action(async (modulePath: string, flags: { migrate?: boolean; stopTimeout: number; waitForDatabase: number }) => {
      const bus = await loadBus(modulePath);
      let stopping: string | undefined;
      const stopped = new Promise<void>((done) => {
        const stop = async (signal: string) => {
          stopping = signal;
          console.error(`rea: ${signal}: stopping, waiting up to ${flags.stopTimeout} ms for running handlers`);
          await bus.stop({ timeoutMs: flags.stopTimeout });
          done();
        };
        process.once('SIGINT', () => void stop('SIGINT'));
        process.once('SIGTERM', () => void stop('SIGTERM'));
      });
      // A database that restarts while workers come up (a deploy, a failover) is not a reason to
      // exit: retry start-up for a while, as the running bus itself rides out lost connections.
      const started = await untilReachable(bus, flags.waitForDatabase, () => stopping !== undefined, async () => {
        if (flags.migrate) await bus.migrate();
        await bus.start();
      });
      if (started) console.error(`rea: running (${bus.instanceId}, schema ${bus.schema}); Ctrl-C stops`);
      await stopped;
    });
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
      if (!bus.driver.isTransientError(err) || Date.now() + delay > until) throw explained;
      console.error(`rea: ${(explained as Error).message}; retrying in ${delay} ms`);
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(5000, delay * 2);
    }
  }
}

export async function loadBus(modulePath: string): Promise<Bus<any>> {
  const mod = await import(pathToFileURL(resolve(modulePath)).href);
  let candidate = mod.bus ?? mod.default;
  if (typeof candidate === 'function') candidate = await candidate();
  if (!candidate || typeof candidate.start !== 'function' || typeof candidate.record !== 'function') {
    throw new OptionsError('run <module>', `${modulePath} must export a bus created with createBus() as \`bus\` or as its default export`);
  }
  return candidate;
}

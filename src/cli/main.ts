// The rea command line: one file per subcommand.
import { createRequire } from 'node:module';
import { Command, CommanderError } from 'commander';
import { ReaError } from '../core/errors.js';
import { namedMessage } from '../core/errors-format.js';
import { captureCommand } from './capture.js';
import { demoCommand } from './demo.js';
import { endpointsCommand } from './endpoints.js';
import { handlersCommand } from './handlers.js';
import { eventsCommand } from './events.js';
import { jobsCommand } from './jobs.js';
import { migrateCommand } from './migrate.js';
import { panelCommand } from './panel.js';
import { retentionCommand } from './retention.js';
import { runCommand } from './run.js';
import { statusCommand } from './status.js';
import { EXIT_FAILED, EXIT_USAGE } from './exit-codes.js';

const { version } = createRequire(import.meta.url)('../../package.json') as { version: string };

/** The command tree. With `json`, commander's own usage errors are not printed: main() prints them as JSON. */
export function program(options: { json?: boolean } = {}): Command {
  const root = new Command('rea')
    .description('rea: a transactional-outbox event bus')
    .version(version, '-V, --version', 'print the version')
    .addCommand(migrateCommand())
    .addCommand(runCommand())
    .addCommand(statusCommand())
    .addCommand(demoCommand())
    .addCommand(captureCommand())
    .addCommand(panelCommand())
    .addCommand(endpointsCommand())
    .addCommand(retentionCommand())
    .addCommand(eventsCommand())
    .addCommand(jobsCommand())
    .addCommand(handlersCommand());
  // Commander prints its own usage errors; throwing instead of exiting lets main() give them the
  // same exit code as rea's. Subcommands added with addCommand do not inherit this, so set it on each.
  const configure = (cmd: Command) => {
    cmd.exitOverride();
    if (options.json) cmd.configureOutput({ outputError: () => {} });
    else cmd.showHelpAfterError();
    cmd.commands.forEach(configure);
  };
  configure(root);
  return root;
}

export async function main(argv: string[]): Promise<void> {
  // A script that asked for --json gets every error as JSON too (on stderr, like the text).
  const json = argv.includes('--json');
  try {
    await program({ json }).parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // Printed by commander unless --json; --help and --version end here too, successfully.
      process.exitCode = err.exitCode === 0 ? 0 : EXIT_USAGE;
      // A malformed value, or an unknown option, names its flag in `field`, as rea's own usage errors do.
      const field = /^error: (?:unknown )?option '(?:-\w, )?(-[^\s',=]+)/.exec(err.message)?.[1];
      if (json && err.exitCode !== 0) console.error(JSON.stringify({ error: { code: 'ERR_USAGE', message: err.message.replace(/^error: /, ''), ...(field ? { field } : {}) } }));
      return;
    }
    if (err instanceof ReaError) {
      const field = (err as { field?: string }).field;
      console.error(json ? JSON.stringify({ error: { code: err.code, message: err.message, ...(field ? { field } : {}) } }) : `rea: ${err.message}`);
      // The command line was right and the work failed: a database that cannot be used, a module that
      // does not load, an action the state refuses (a replay while its job still waits, a forget of a
      // handler a worker runs). Everything else names a flag or value that was wrong.
      process.exitCode = err.code === 'ERR_DATABASE' || err.code === 'ERR_MODULE' || err.code === 'ERR_BUS_STATE' ? EXIT_FAILED : EXIT_USAGE;
      return;
    }
    // Not one of rea's errors (a bug, or something no mapping foresaw): one line, its name and
    // message, in the form asked for; the stack only when asked for (REA_DEBUG=1), for a bug report.
    const message = namedMessage(err);
    const debug = process.env.REA_DEBUG === '1';
    const stack = debug && err instanceof Error && err.stack ? err.stack : undefined;
    console.error(json
      ? JSON.stringify({ error: { code: 'ERR_UNEXPECTED', message, ...(stack ? { stack } : {}) } })
      : stack ? `rea: ${message}\n${stack}` : `rea: ${message} (REA_DEBUG=1 prints the stack)`);
    process.exitCode = EXIT_FAILED;
  }
}

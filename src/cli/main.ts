// The rea command line: one file per subcommand.
import { Command } from 'commander';
import { ReaError } from '../core/errors.js';
import { captureCommand } from './capture.js';
import { demoCommand } from './demo.js';
import { endpointsCommand } from './endpoints.js';
import { eventsCommand } from './events.js';
import { jobsCommand } from './jobs.js';
import { migrateCommand } from './migrate.js';
import { panelCommand } from './panel.js';
import { retentionCommand } from './retention.js';
import { runCommand } from './run.js';
import { statusCommand } from './status.js';

export function program(): Command {
  return new Command('rea')
    .description('rea: a transactional-outbox event bus')
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
    .showHelpAfterError();
}

export async function main(argv: string[]): Promise<void> {
  try {
    await program().parseAsync(argv);
  } catch (err) {
    if (err instanceof ReaError) {
      console.error(`rea: ${err.message}`);
      process.exitCode = 2;
      return;
    }
    throw err;
  }
}

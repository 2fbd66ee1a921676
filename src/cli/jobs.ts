// rea jobs retry | cancel: repair actions on jobs. Each says which jobs it changed and, for the
// rest, why they were left alone (their state, or an event retention already removed).
import { Command } from 'commander';
import type { Bus } from '../bus.js';
import { isJobId, MAX_JOB_ID } from '../core/job-id.js';
import type { EventSchemas } from '../core/events.js';
import { addConnectionFlags, type ConnectionFlags } from './settings.js';
import { withAdminBus } from './admin-bus.js';
import { UsageError } from './usage-error.js';
import { EXIT_FAILED } from './exit-codes.js';
import { jobsListCommand } from './lists.js';

export interface JobRepairOutcome {
  action: 'retried' | 'cancelled';
  changed: string[];
  unchanged: { id: string; reason: string }[];
}

function checkIds(ids: string[], command: string): void {
  const bad = ids.find((id) => !isJobId(id));
  if (bad) throw new UsageError(command, `${bad} is not a job id (a whole number from 1 to ${MAX_JOB_ID})`);
}

/** Why each asked-for id did not change, read after the action. */
async function explain(bus: Bus<EventSchemas>, ids: string[], changed: string[], action: JobRepairOutcome['action']) {
  const rest = ids.filter((id) => !changed.includes(id));
  const states = new Map((await bus.driver.operations.jobStates({ ids: rest })).map((s) => [s.id, s]));
  return rest.map((id) => {
    const s = states.get(id);
    if (!s) return { id, reason: 'no such job' };
    if (action === 'retried') {
      if ((s.state === 'discarded' || s.state === 'cancelled') && !s.eventFound) return { id, reason: `${s.state}, but retention removed its event` };
      if ((s.state === 'discarded' || s.state === 'cancelled') && s.waitingJobId !== null) {
        return { id, reason: `${s.state}, but job ${s.waitingJobId} of its handler for the same event waits or runs` };
      }
      return { id, reason: `${s.state}: only discarded or cancelled jobs are retried` };
    }
    return { id, reason: s.state === 'running' ? 'running: its handler may already have acted; let it finish' : `${s.state}: only waiting jobs are cancelled` };
  });
}

export function jobsCommand(): Command {
  const retry = addConnectionFlags(new Command('retry').description('run discarded (or cancelled) jobs again now, with a fresh allowance of attempts'))
    .argument('[ids...]', 'job ids to retry')
    .option('--discarded', 'retry every discarded job')
    .option('--cancelled', 'retry every cancelled job')
    .option('--handler <name>', 'with --discarded / --cancelled: only this handler\'s jobs')
    .option('--json', 'print { action, changed, unchanged } as JSON')
    .action(async (ids: string[], flags: ConnectionFlags & { discarded?: boolean; cancelled?: boolean; handler?: string; json?: boolean }) => {
      const byState = flags.discarded ? 'discarded' : flags.cancelled ? 'cancelled' : undefined;
      if ((byState !== undefined) === (ids.length > 0) || (flags.discarded && flags.cancelled)) {
        throw new UsageError('jobs retry', 'give job ids, or one of --discarded / --cancelled');
      }
      if (flags.handler && !byState) throw new UsageError('jobs retry --handler', 'goes with --discarded or --cancelled');
      checkIds(ids, 'jobs retry');
      const outcome = await withAdminBus(flags, async (bus): Promise<JobRepairOutcome> => {
        const changed = await bus.jobs.retry(byState ? { state: byState, handler: flags.handler } : ids);
        return { action: 'retried', changed, unchanged: await explain(bus, ids, changed, 'retried') };
      });
      console.log(flags.json ? JSON.stringify(outcome) : formatJobRepair(outcome));
      // A script that names jobs learns from the status whether each was changed (the output says why not).
      if (outcome.unchanged.length > 0) process.exitCode = EXIT_FAILED;
    });
  const cancel = addConnectionFlags(new Command('cancel').description('cancel waiting jobs (available or retryable)'))
    .argument('<ids...>', 'job ids to cancel')
    .option('--json', 'print { action, changed, unchanged } as JSON')
    .action(async (ids: string[], flags: ConnectionFlags & { json?: boolean }) => {
      checkIds(ids, 'jobs cancel');
      const outcome = await withAdminBus(flags, async (bus): Promise<JobRepairOutcome> => {
        const changed = await bus.jobs.cancel(ids);
        return { action: 'cancelled', changed, unchanged: await explain(bus, ids, changed, 'cancelled') };
      });
      console.log(flags.json ? JSON.stringify(outcome) : formatJobRepair(outcome));
      // A script that names jobs learns from the status whether each was changed (the output says why not).
      if (outcome.unchanged.length > 0) process.exitCode = EXIT_FAILED;
    });
  return new Command('jobs').description('list and repair jobs').addCommand(jobsListCommand()).addCommand(retry).addCommand(cancel);
}

export function formatJobRepair(o: JobRepairOutcome): string {
  const n = o.changed.length;
  const lines = [`${o.action} ${n} job${n === 1 ? '' : 's'}${n ? `: ${o.changed.join(', ')}` : ''}`];
  for (const u of o.unchanged) lines.push(`  left alone ${u.id}: ${u.reason}`);
  return lines.join('\n');
}

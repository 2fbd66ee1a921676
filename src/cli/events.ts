// rea events …: list events (lists.ts) and repair them. `requeue` puts poisoned events back in front of the
// relay (fan attempts reset) and says which ones it changed and which it left alone.
import { Command } from 'commander';
import { addConnectionFlags, type ConnectionFlags } from './settings.js';
import { withAdminBus } from './admin-bus.js';
import { UsageError } from './usage-error.js';
import { EXIT_FAILED } from './exit-codes.js';
import { eventsListCommand, withFlags } from './lists.js';
import type { HandlerReplay, NewDelivery } from '../index.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface RequeueOutcome {
  requeued: string[];
  /** Ids asked for that were not poisoned (or do not exist), so nothing changed for them. */
  unchanged: string[];
}

interface ReplayFlags {
  handler?: string;
  endpoint?: string;
  type?: string;
  subject?: string;
  trace?: string;
  since?: string;
  until?: string;
  json?: boolean;
}

export function eventsCommand(): Command {
  const requeue = addConnectionFlags(new Command('requeue').description('requeue poisoned events (after fixing what made them fail)'))
    .argument('[ids...]', 'event ids to requeue')
    .option('--poisoned', 'requeue every poisoned event')
    .option('--json', 'print { requeued, unchanged } as JSON')
    .action(async (ids: string[], flags: ConnectionFlags & { poisoned?: boolean; json?: boolean }) => {
      if (Boolean(flags.poisoned) === (ids.length > 0)) throw new UsageError('events requeue', 'give event ids or --poisoned (one of the two)');
      const bad = ids.find((id) => !UUID.test(id));
      if (bad) throw new UsageError('events requeue', `${bad} is not an event id (a UUID)`);
      const requeued = await withAdminBus(flags, (bus) => bus.events.requeue(flags.poisoned ? { poisoned: true } : ids));
      const outcome: RequeueOutcome = { requeued, unchanged: ids.filter((id) => !requeued.includes(id.toLowerCase())) };
      console.log(flags.json ? JSON.stringify(outcome) : formatRequeue(outcome));
      // A script that names events learns from the status whether each was requeued.
      if (outcome.unchanged.length > 0) process.exitCode = EXIT_FAILED;
    });
  const replay = addConnectionFlags(new Command('replay').description('send stored events again: one event to an in-process handler (a new job) or a webhook endpoint (a new delivery); without an id, every fanned-out event the filters and the handler take, to that handler'))
    .argument('[id]', 'event id (without one: every event the filters match, to --handler)')
    .option('--handler <name>', 'the handler to run on it (one a bus registered that subscribes to its type)')
    .option('--endpoint <id>', 'the webhook endpoint to deliver it to')
    .option('--type <type>', "without an id: an event type or a 'prefix.*' pattern")
    .option('--subject <subject>', 'without an id: only this subject')
    .option('--trace <id>', 'without an id: only this trace id')
    .option('--since <time>', 'without an id: recorded at or after (ISO 8601)')
    .option('--until <time>', 'without an id: recorded before (ISO 8601)')
    .option('--json', 'print what was made as JSON')
    .action(async (id: string | undefined, flags: ConnectionFlags & ReplayFlags) => {
      if ((flags.handler === undefined) === (flags.endpoint === undefined)) throw new UsageError('events replay', 'give --handler <name> or --endpoint <id> (one of the two)');
      const filtered = (['type', 'subject', 'trace', 'since', 'until'] as const).find((f) => flags[f] !== undefined);
      if (id === undefined) {
        if (flags.handler === undefined) throw new UsageError('--endpoint', 'takes one event id: a replay of many events goes to a --handler');
        const filter = { type: flags.type, subject: flags.subject, traceId: flags.trace, since: flags.since, until: flags.until };
        const done = await withAdminBus(flags, (bus) => withFlags(() => bus.events.replay(filter, { handler: flags.handler! })));
        console.log(flags.json ? JSON.stringify(done)
          : `replayed ${done.replayed} event${done.replayed === 1 ? '' : 's'} to handler ${done.handler}${done.skipped ? `; skipped ${done.skipped} (a job of it still waits or runs)` : ''}`);
        return;
      }
      if (filtered) throw new UsageError(`--${filtered}`, 'filters a replay of many events: give no event id with it');
      if (!UUID.test(id)) throw new UsageError('events replay', `${id} is not an event id (a UUID)`);
      if (flags.endpoint !== undefined && !UUID.test(flags.endpoint)) throw new UsageError('--endpoint', `${flags.endpoint} is not an endpoint id (a UUID)`);
      const made = await withAdminBus(flags, async (bus): Promise<HandlerReplay | NewDelivery> => (flags.handler !== undefined
        ? bus.events.replay(id, { handler: flags.handler })
        : bus.events.replay(id, { endpointId: flags.endpoint! })));
      console.log(flags.json ? JSON.stringify(made) : 'jobId' in made
        ? `replayed event ${made.eventId} to handler ${made.handler}: job ${made.jobId}`
        : `replayed event ${made.eventId} to endpoint ${made.endpointId}: delivery ${made.deliveryId} (webhook-id ${made.webhookId})`);
    });
  return new Command('events').description('list and repair events').addCommand(eventsListCommand()).addCommand(requeue).addCommand(replay);
}

export function formatRequeue(o: RequeueOutcome): string {
  const lines = [`requeued ${o.requeued.length} event${o.requeued.length === 1 ? '' : 's'}${o.requeued.length ? ':' : ''}`];
  for (const id of o.requeued) lines.push(`  ${id}`);
  if (o.unchanged.length) {
    lines.push(`left alone ${o.unchanged.length} (not poisoned, or no such event):`);
    for (const id of o.unchanged) lines.push(`  ${id}`);
  }
  return lines.join('\n');
}

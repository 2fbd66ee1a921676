// rea handlers list | forget: the subscriptions stored in the database. A handler removed or
// renamed in the code keeps its row, so the relay keeps making jobs for it that nobody runs (the
// handler_unattended alert); `forget` deletes the row and cancels those jobs.
import { Command } from 'commander';
import { formatMs } from '../admin/alerts.js';
import { HandlerInUseError } from '../core/errors.js';
import type { HandlerSummary } from '../driver/admin.js';
import { withAdminBus } from './admin-bus.js';
import { addConnectionFlags, type ConnectionFlags } from './settings.js';

export function formatHandler(h: HandlerSummary): string {
  const unseen = Math.max(0, h.readAt.getTime() - h.seenAt.getTime());
  // A count that stopped at the exact-count limit: there are more ("more than 10000").
  const n = (k: 'waiting' | 'running') => (h.capped.includes(k) ? `more than ${h[k]}` : String(h[k]));
  return `${h.name}  ${h.patterns.join(', ')}  waiting ${n('waiting')} · running ${n('running')} · last had by a worker ${formatMs(unseen)} ago`;
}

export function handlersCommand(): Command {
  const list = addConnectionFlags(new Command('list').description('every stored handler: patterns, waiting and running jobs, last heartbeat'))
    .option('--json', 'print the handlers as JSON')
    .action(async (flags: ConnectionFlags & { json?: boolean }) => {
      const handlers = await withAdminBus(flags, (bus) => bus.handlers.list());
      if (flags.json) return console.log(JSON.stringify(handlers));
      console.log(handlers.length === 0 ? 'no handlers stored (none has been registered by a started bus)' : handlers.map(formatHandler).join('\n'));
    });
  const forget = addConnectionFlags(new Command('forget').description('for a handler gone from the code: stop making jobs for it and cancel its waiting ones'))
    .argument('<name>', 'the handler name')
    .option('--force', 'even if a running worker had it recently')
    .option('--json', 'print { handler, cancelled } as JSON')
    .action(async (name: string, flags: ConnectionFlags & { force?: boolean; json?: boolean }) => {
      const { cancelled } = await withAdminBus(flags, (bus) => bus.handlers.forget(name, { force: flags.force === true })).catch((err: unknown) => {
        // The library's refusal names its option ({ force: true }); here the way past it is the flag.
        throw err instanceof HandlerInUseError ? err.withForce('--force') : err;
      });
      console.log(flags.json ? JSON.stringify({ handler: name, cancelled })
        : `forgot handler '${name}'; cancelled ${cancelled} waiting job${cancelled === 1 ? '' : 's'} (running ones finish; a bus that registers it again brings it back)`);
    });
  return new Command('handlers').description('stored handler subscriptions: list, forget one gone from the code').addCommand(list).addCommand(forget);
}

// rea events list | rea jobs list: find the ids the repair commands take, newest first, one page
// at a time (--cursor with the printed next cursor). Filters are the library's; a bad one names the flag.
import { Command } from 'commander';
import { InvalidFilterError } from '../core/errors.js';
import type { EventSummary, JobSummary } from '../driver/admin.js';
import type { EventListFilter, JobListFilter, Page } from '../core/filters.js';
import { withAdminBus } from './admin-bus.js';
import { printable } from './printable.js';
import { addConnectionFlags, wholeNumber, type ConnectionFlags } from './settings.js';
import { UsageError } from './usage-error.js';

const iso = (d: Date | null) => (d ? d.toISOString() : '-');
const FLAG_OF: Record<string, string> = { eventId: '--event', traceId: '--trace', handler: '--handler' };

/** A filter the library refuses names the flag the user typed. */
export async function withFlags<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (err instanceof InvalidFilterError) {
      throw new UsageError(FLAG_OF[err.parameter] ?? `--${err.parameter}`, err.message.replace(/^invalid filter \S+: /, ''));
    }
    throw err;
  }
}

function printPage<T>(page: Page<T>, json: boolean | undefined, line: (item: T) => string, none: string): void {
  if (json) return console.log(JSON.stringify(page));
  console.log(page.items.length === 0 ? none : page.items.map(line).join('\n'));
  if (page.nextCursor) console.log(`(more: --cursor ${page.nextCursor})`);
}

// Types, subjects, handler names and errors are stored data (a capture trigger, another
// application, a handler's exception): they go to the terminal through printable().
export function formatEventLine(e: EventSummary): string {
  const problem = e.state === 'poisoned' ? `  ${printable(e.lastError ?? '')}` : '';
  return `${e.id}  ${e.state.padEnd(8)} ${iso(e.createdAt)}  ${printable(e.type)}${e.subject ? ` ${printable(e.subject)}` : ''}${problem}`;
}

export function formatJobLine(j: JobSummary): string {
  const last = j.errors.at(-1);
  return `${j.id.padStart(6)}  ${j.state.padEnd(9)} ${j.kind} ${printable(j.target)}  attempt ${j.attempt}/${j.maxAttempts}  event ${j.eventId}${last ? `  last error: ${printable(last.message.replace(/\s+/g, ' ').slice(0, 120))}` : ''}`;
}

export function eventsListCommand(): Command {
  return addConnectionFlags(new Command('list').description('events, newest first: find the ids `events requeue` takes'))
    .option('--state <state>', 'unfanned, fanned or poisoned')
    .option('--type <type>', "an event type or a 'prefix.*' pattern")
    .option('--subject <subject>', 'only this subject')
    .option('--trace <id>', 'only this trace id')
    .option('--since <time>', 'recorded at or after (ISO 8601)')
    .option('--until <time>', 'recorded before (ISO 8601)')
    .option('--cursor <id>', 'the next page, as printed after the last one')
    .option('--limit <n>', 'events per page (1–500)', wholeNumber(1, 500), 50)
    .option('--json', 'print { items, nextCursor } as JSON')
    .action(async (flags: ConnectionFlags & { state?: string; type?: string; subject?: string; trace?: string; since?: string; until?: string; cursor?: string; limit: number; json?: boolean }) => {
      const filter: EventListFilter = {
        state: flags.state as EventListFilter['state'], type: flags.type, subject: flags.subject, traceId: flags.trace,
        since: flags.since, until: flags.until, cursor: flags.cursor, limit: flags.limit,
      };
      const page = await withAdminBus(flags, (bus) => withFlags(() => bus.events.list(filter)));
      printPage(page, flags.json, formatEventLine, 'no events match');
    });
}

export function jobsListCommand(): Command {
  return addConnectionFlags(new Command('list').description('jobs, newest first, with their last error: find the ids `jobs retry` and `jobs cancel` take'))
    .option('--state <state>', 'available, running, completed, retryable, discarded or cancelled')
    .option('--kind <kind>', 'handler or webhook')
    .option('--handler <name>', 'a handler name (for webhook jobs: the endpoint id)')
    .option('--event <id>', "only this event's jobs")
    .option('--cursor <id>', 'the next page, as printed after the last one')
    .option('--limit <n>', 'jobs per page (1–500)', wholeNumber(1, 500), 50)
    .option('--json', 'print { items, nextCursor } as JSON')
    .action(async (flags: ConnectionFlags & { state?: string; kind?: string; handler?: string; event?: string; cursor?: string; limit: number; json?: boolean }) => {
      const filter: JobListFilter = {
        state: flags.state as JobListFilter['state'], kind: flags.kind as JobListFilter['kind'], handler: flags.handler,
        eventId: flags.event, cursor: flags.cursor, limit: flags.limit,
      };
      const page = await withAdminBus(flags, (bus) => withFlags(() => bus.jobs.list(filter)));
      printPage(page, flags.json, formatJobLine, 'no jobs match');
    });
}

// rea capture: print (or apply) the migration SQL for a trigger that records an event when a
// watched column of an application table really changes.
import { Command } from 'commander';
import { DatabaseError, NotFoundError, OptionsError, ReaError } from '../core/errors.js';
import {
  captureFindSql, CaptureOptionsError, captureRemovalSql, captureTriggerSql, inOneTransaction, type CaptureEventTypes, type CaptureRemovalOptions,
} from '../drivers/postgres/capture.js';
import { checkSchemaName } from '../drivers/postgres/common.js';
import { addConnectionFlags, resolveConnection, type ConnectionFlags } from './settings.js';
import { withAdminBus } from './admin-bus.js';
import { flagError, UsageError } from './usage-error.js';

const list = (v: string) => v.split(',').map((s) => s.trim()).filter(Boolean);

interface ColumnFlags { table: string; subject?: string; watch?: string[]; payload?: string[] }

/**
 * What the database said about the up SQL, as an error naming the flag at fault: the table (or
 * its schema) missing, a column missing (the script selects every named column first), the name
 * taken by another table's capture, anything else it refused. Errors that are not the database's come back as they are.
 */
function applyError(err: unknown, flags: ColumnFlags): unknown {
  if (err instanceof ReaError || typeof err !== 'object' || err === null) return err;
  const code = String((err as { code?: unknown }).code ?? '');
  const message = String((err as { message?: unknown }).message ?? '');
  if (code === '42P01' || code === '3F000') return new OptionsError('--table', `table ${flags.table} does not exist (the database said: ${message})`);
  if (code === '42703') {
    const column = /^column "([^"]+)" does not exist$/.exec(message)?.[1];
    const field = column === undefined || column === flags.subject ? '--subject' : flags.watch?.includes(column) ? '--watch' : '--payload';
    return new OptionsError(field, `table ${flags.table} has no column ${column ?? '(unnamed)'} (the database said: ${message})`);
  }
  // Raised by the up script itself: the table is one of rea's own.
  if (code === '42809') return new OptionsError('--table', message);
  // Raised by the up script itself: the function name is another table's capture.
  if (code === '42723') return new OptionsError('--name', `${message} (the default name is capture_<table>; give --name)`);
  // Raised by the up script itself: the table has a capture of another name already.
  if (code === '42710' && message.includes('already has a rea capture')) return new OptionsError('--name', message);
  if (/^[0-9A-Z]{5}$/.test(code)) return new DatabaseError('refused', `the capture trigger on ${flags.table} was not applied: ${message} (SQLSTATE ${code})`, { cause: err });
  return err;
}

// captureTriggerSql names its options (watchColumns[1]); the user typed flags.
const FLAG_OF: Record<string, string> = {
  schema: '--schema', table: '--table', subjectColumn: '--subject', watchColumns: '--watch',
  eventType: '--type', eventTypes: '--insert, --update or --delete', 'eventTypes.insert': '--insert',
  'eventTypes.update': '--update', 'eventTypes.delete': '--delete', name: '--name',
};

function captureSql(...args: Parameters<typeof captureTriggerSql>): ReturnType<typeof captureTriggerSql> {
  try {
    return captureTriggerSql(...args);
  } catch (err) {
    if (!(err instanceof CaptureOptionsError)) throw err;
    // Without --payload the payload columns are the --watch list.
    const payloadFlag = args[0].payloadColumns === args[0].watchColumns ? '--watch' : '--payload';
    throw flagError(err, (option) => (option === 'payloadColumns' ? payloadFlag : FLAG_OF[option])) ?? err;
  }
}

export function captureCommand(): Command {
  return addConnectionFlags(
    new Command('capture').description('generate a capture trigger: record an event when watched columns of a table really change'),
  )
    .requiredOption('--table <[schema.]table>', 'the application table')
    .option('--subject <column>', 'key column used as the event subject (required, but with --down)')
    .option('--watch <cols>', 'comma-separated columns whose real change records an update event', list)
    .option('--payload <cols>', 'comma-separated columns carried in the payload', list)
    .option('--type <type>', 'event type for inserts and updates')
    .option('--insert <type>', 'event type for inserts')
    .option('--update <type>', 'event type for updates')
    .option('--delete <type>', 'event type for deletes')
    .option('--name <name>', "base name of the trigger and its function (with --down: remove only the capture of this name)")
    .option('--down', "print (with --apply: run) the SQL that removes the table's capture instead; needs only --table (types and columns play no part)")
    .option('--json', 'print { up, down } as JSON ({ down } with --down; with --apply also applied / removed: the triggers removed, and the table)')
    .option('--apply', 'run the up SQL (the down SQL with --down) against the database now (in one transaction)')
    .option('--no-transaction', 'print the statements without begin / commit, for a migration tool that runs each migration in a transaction of its own')
    .action(async (flags: CaptureFlags) => {
      const schema = flags.schema ?? process.env.REA_SCHEMA ?? 'rea';
      // A database setting, checked as every command checks it (ERR_OPTIONS, naming REA_SCHEMA
      // when that gave it); left to captureSql it was a usage error naming --schema either way.
      checkSchemaName(schema, flags.schema !== undefined ? '--schema' : 'REA_SCHEMA');
      if (flags.down) return removeCapture(flags, schema);
      const eventTypes: CaptureEventTypes | undefined = flags.insert || flags.update || flags.delete
        ? { insert: flags.insert, update: flags.update, delete: flags.delete }
        : undefined;
      // Said in flags: the library's words for these name its options (eventType, eventTypes).
      if (flags.type === undefined && !eventTypes) throw new UsageError('--type', 'give --type <type>, or at least one of --insert, --update, --delete');
      if (flags.type !== undefined && eventTypes) throw new UsageError('--type', 'give --type or --insert / --update / --delete, not both');
      if (flags.subject === undefined) throw new UsageError('--subject', 'give the key column whose value becomes the event subject');
      const bare = captureSql({
        schema, table: flags.table, subjectColumn: flags.subject, watchColumns: flags.watch ?? [],
        payloadColumns: flags.payload ?? flags.watch ?? [], name: flags.name,
        ...(eventTypes ? { eventTypes } : { eventType: flags.type }),
      });
      // Printed, each script brings its own transaction: run by hand (psql -f goes on past an
      // error), a failure half way left a function without its triggers, or a table's triggers
      // dropped and not made again. --apply runs the bare statements in a transaction of its own.
      const sql = flags.transaction ? { up: inOneTransaction(bare.up), down: inOneTransaction(bare.down) } : bare;
      if (flags.apply) {
        resolveConnection(flags); // fail early with a clear message when no database is given
        await withAdminBus(flags, (bus) => bus.driver.execScript(bare.up)).catch((err: unknown) => Promise.reject(applyError(err, flags)));
        console.log(flags.json ? JSON.stringify({ applied: true, table: flags.table, ...sql }) : `capture trigger on ${flags.table} applied`);
        return;
      }
      console.log(flags.json ? JSON.stringify(sql) : sql.up);
    });
}

type CaptureFlags = ConnectionFlags & {
  table: string; subject?: string; watch?: string[]; payload?: string[]; type?: string;
  insert?: string; update?: string; delete?: string; name?: string; down?: boolean; json?: boolean; apply?: boolean;
  transaction: boolean;
};

/**
 * --down: the table's rea capture, found by what its triggers are (see captureFindSql), so that
 * `orders` and `public.orders` find the same one. With --apply it says what it removed, and
 * refuses (exit 2) a table that does not exist or has no capture: it said 'removed' of both.
 */
async function removeCapture(flags: CaptureFlags, schema: string): Promise<void> {
  const options = { schema, table: flags.table, name: flags.name };
  const [bare, find] = removalSql(options);
  const down = flags.transaction ? inOneTransaction(bare) : bare;
  if (!flags.apply) {
    console.log(flags.json ? JSON.stringify({ down }) : down);
    return;
  }
  resolveConnection(flags);
  const removed = await withAdminBus(flags, async (bus) => {
    const rows = (await bus.driver.query<{ table_found: boolean; trigger: string | null; function: string | null }>(find)).rows;
    if (!rows[0]?.table_found) throw new OptionsError('--table', `table ${flags.table} does not exist (looked up as --apply would resolve it: through search_path when unqualified)`);
    const triggers = rows.filter((r) => r.trigger !== null);
    if (triggers.length === 0) {
      const which = flags.name === undefined ? 'rea capture trigger' : `rea capture trigger of name ${flags.name}`;
      throw new NotFoundError(`${which} on table ${flags.table}`, 'nothing was removed');
    }
    await bus.driver.execScript(bare);
    return { triggers: triggers.map((r) => r.trigger as string), functions: [...new Set(triggers.map((r) => r.function as string))] };
  }).catch((err: unknown) => Promise.reject(err instanceof ReaError ? err : applyError(err, { table: flags.table })));
  const names = removed.triggers.join(', ');
  console.log(flags.json
    ? JSON.stringify({ removed: removed.triggers.length, triggers: removed.triggers, functions: removed.functions, table: flags.table, down })
    : `capture on ${flags.table} removed: ${removed.triggers.length} trigger${removed.triggers.length === 1 ? '' : 's'} (${names}) of function ${removed.functions.join(', ')}`);
}

function removalSql(options: CaptureRemovalOptions): [down: string, find: string] {
  try {
    return [captureRemovalSql(options), captureFindSql(options)];
  } catch (err) {
    if (!(err instanceof CaptureOptionsError)) throw err;
    throw flagError(err, (option) => FLAG_OF[option]) ?? err;
  }
}

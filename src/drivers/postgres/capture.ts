// Capture triggers: generate migration SQL that records a rea event from an application table's
// own INSERT / UPDATE / DELETE, for writes that never go through bus.record().
// Pure string building; the caller runs `up` (and later `down`) like any other migration, each in one transaction.
import { OptionsError } from '../../core/errors.js';
import { EVENT_TYPE_RULE, isEventTypeName } from '../../core/events.js';
import { quoteSchema } from './common.js';

export interface CaptureEventTypes {
  insert?: string;
  update?: string;
  delete?: string;
}

export interface CaptureTriggerOptions {
  /** rea's schema, where the events table and uuid_v7() live. Default 'rea'. */
  schema?: string;
  /** The application table: 'orders' (resolved by search_path when `up` runs) or 'public.orders'. */
  table: string;
  /** One type for INSERT and UPDATE (payload shapes tell them apart); DELETE is not captured. */
  eventType?: string;
  /** A type per operation; only the operations named here are captured. */
  eventTypes?: CaptureEventTypes;
  /** The key column; its value cast to text becomes the event subject. */
  subjectColumn: string;
  /** An UPDATE records an event only when one of these columns really changed. Required when UPDATE is captured. */
  watchColumns: string[];
  /** Columns copied into the payload: the row for INSERT / DELETE, `{ before, after }` for UPDATE. */
  payloadColumns: string[];
  /** Base name of the trigger function and triggers. Default `capture_<table>` (`capture_<schema>_<table>` when qualified). */
  name?: string;
}

/**
 * Bare statements, for a migration tool that runs each migration in a transaction of its own.
 * Run each script in one transaction (inOneTransaction() wraps it for psql and the like): each
 * statement on its own would leave what came before a failure half way (a function without its
 * triggers, or a table's triggers dropped and not made again).
 */
export interface CaptureTriggerSql {
  up: string;
  down: string;
}

/** A capture script wrapped in begin / commit, so that run by hand (psql -f) it applies whole or not at all. */
export function inOneTransaction(script: string): string {
  return `begin;\n${script.trim()}\ncommit;\n`;
}

/** A capture option is missing or unsafe; `field` names it (e.g. `watchColumns[1]`). */
export class CaptureOptionsError extends OptionsError {}

type Op = 'insert' | 'update' | 'delete';
const OPS: readonly Op[] = ['insert', 'update', 'delete'];

// Identifiers are taken exactly as they are in the catalog and always quoted, so `Orders` means
// the mixed-case table. Anything beyond plain word characters is refused rather than escaped: a
// name that needs escaping is far more often a mistake (or an attack) than a real table.
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_$]*$/;
const MAX_IDENTIFIER_BYTES = 63;
// Leaves room for the `_insert` / `_update` / `_delete` suffix of the trigger names.
const MAX_NAME_BYTES = MAX_IDENTIFIER_BYTES - '_insert'.length;
// jsonb_build_object takes at most 100 arguments; wider payloads are built in chunks and merged.
const PAIRS_PER_CALL = 50;
// On rea's events table the trigger's own insert fires it again, until the stack runs out: every
// record() fails. On its other tables each relay or worker write would record an event. (Only
// these: application tables may share rea's schema, `public` say.)
const REA_TABLES = ['events', 'jobs', 'consumes', 'handlers', 'leader', 'migrations', 'endpoints', 'webhook_attempts', 'events_archive', 'admin_sessions_ended'];
const OWN_TABLE = "is one of rea's own tables: capture triggers are for application tables";
// How a capture function's body begins its insert: what tells one (of any name) among a table's triggers.
const EVENTS_INSERT = (reaSchema: string) => `insert into ${reaSchema}.events`;

export function captureTriggerSql(options: CaptureTriggerOptions): CaptureTriggerSql {
  const reaSchema = checkSchema(options.schema ?? 'rea');
  const table = checkTable(options.table);
  if (table.schema === (options.schema ?? 'rea') && REA_TABLES.includes(table.table)) throw new CaptureOptionsError('table', OWN_TABLE);
  const types = checkEventTypes(options);
  const subject = checkIdentifier('subjectColumn', options.subjectColumn);
  const watch = checkColumns('watchColumns', options.watchColumns);
  const payload = checkColumns('payloadColumns', options.payloadColumns);
  if (types.update !== undefined && watch.length === 0) {
    throw new CaptureOptionsError('watchColumns', 'must name at least one column when UPDATE is captured');
  }
  const name = options.name === undefined ? defaultName(table) : checkIdentifier('name', options.name, MAX_NAME_BYTES);

  const fn = `${reaSchema}.${quoteIdent(name)}`;
  const target = table.quoted;
  const createdBy = literal(`trigger:${options.table}`);
  const row = (rec: 'NEW' | 'OLD') => jsonObject(payload.map((c) => [literal(c), `${rec}.${quoteIdent(c)}`]));

  const insertEvent = (type: string, rec: 'NEW' | 'OLD', payloadExpr: string) => /* sql */ `
    ${EVENTS_INSERT(reaSchema)} (id, type, subject, payload, created_by)
    values (${reaSchema}.uuid_v7(), ${literal(type)}, ${rec}.${quoteIdent(subject)}::text, ${payloadExpr}, ${createdBy});`;

  const branches: string[] = [];
  if (types.insert !== undefined) branches.push(`TG_OP = 'INSERT' then${insertEvent(types.insert, 'NEW', row('NEW'))}`);
  if (types.update !== undefined) {
    const change = jsonObject([["'before'", row('OLD')], ["'after'", row('NEW')]]);
    branches.push(`TG_OP = 'UPDATE' then${insertEvent(types.update, 'NEW', change)}`);
  }
  if (types.delete !== undefined) branches.push(`TG_OP = 'DELETE' then${insertEvent(types.delete, 'OLD', row('OLD'))}`);

  // No NOTIFY here: a notifying commit serializes with every other one (see DESIGN "Wake-ups");
  // the relay's partial-index poll finds these rows within a second when idle.
  const body = `
begin
  if ${branches.join('\n  elsif ')}
  end if;
  return null;
end
`;
  const tag = dollarTag(body);

  const triggerName = (op: Op) => quoteIdent(`${name}_${op}`);
  const dropTriggers = OPS.map((op) => `drop trigger if exists ${triggerName(op)} on ${target};`).join('\n');
  // Every trigger's WHEN names each column its function reads (num_nulls(...) >= 0 is always
  // true), so that PostgreSQL records the dependency: DROP COLUMN of a carried column is refused
  // while the capture exists (not accepted, leaving every later write to the table failing on
  // `record "new" has no field`), and so is a type change. A rename is not tracked by
  // PostgreSQL for a function body: see the README, "Schema changes to a captured table".
  const carried = (rec: 'NEW' | 'OLD') => {
    const refs = [...new Set([subject, ...payload])].map((c) => `${rec}.${quoteIdent(c)}`);
    const calls: string[] = [];
    for (let i = 0; i < refs.length; i += PAIRS_PER_CALL) calls.push(`pg_catalog.num_nulls(${refs.slice(i, i + PAIRS_PER_CALL).join(', ')}) >= 0`);
    return calls.join(' and ');
  };
  const createTriggers = OPS.filter((op) => types[op] !== undefined).map((op) => {
    // The WHEN clause keeps a no-op UPDATE (say, only updated_at) from even calling the function.
    const when = op === 'update'
      ? `\n  when ((${watch.map((c) => `OLD.${quoteIdent(c)} is distinct from NEW.${quoteIdent(c)}`).join('\n        or ')})\n        and ${carried('NEW')})`
      : `\n  when (${carried(op === 'delete' ? 'OLD' : 'NEW')})`;
    return `create trigger ${triggerName(op)}\n  after ${op} on ${target}\n  for each row${when}\n  execute function ${fn}();`;
  });

  const checkedColumns = [...new Set([subject, ...watch, ...payload])].map(quoteIdent).join(', ');
  // One of rea's tables reached through search_path is refused here (see OWN_TABLE).
  // A name already used for another table's capture (the same --name given twice, or defaults
  // that meet: public_orders and public.orders) would have `create or replace` swap the function
  // under that table's triggers: its writes would then record this table's event types, or fail
  // on columns it lacks. Refused, unless the definition is the very same, or the table is given
  // unqualified and the other has its name: one migration run in each tenant's schema, where a
  // changed definition must reach every tenant's (same-shaped) table.
  const check = `
declare
  other regclass;
  existing record;
begin
  if exists (select from pg_catalog.pg_class where oid = ${literal(target)}::regclass
              and relnamespace = ${literal(reaSchema)}::regnamespace and relname in (${REA_TABLES.map(literal).join(', ')})) then
    raise exception using errcode = 'wrong_object_type', message = pg_catalog.format('table %s %s', ${literal(target)}::regclass, ${literal(OWN_TABLE)});
  end if;
  select t.tgrelid::regclass into other
    from pg_catalog.pg_trigger t join pg_catalog.pg_proc p on p.oid = t.tgfoid
   where p.oid = pg_catalog.to_regprocedure(${literal(`${fn}()`)})
     and t.tgrelid <> ${literal(target)}::regclass
     and p.prosrc <> ${literal(body)}${table.schema !== undefined ? '' : `
     and (select relname from pg_catalog.pg_class where oid = t.tgrelid) <> ${literal(table.table)}`}
   limit 1;
  if other is not null then
    raise exception using errcode = 'duplicate_function',
      message = pg_catalog.format('capture function %s() already serves the triggers of table %s, with another definition; give this table''s capture a name of its own', ${literal(fn)}, other);
  end if;
  -- A capture of this table under another name: both would record every change, each its own event.
  select t.tgname, p.proname into existing
    from pg_catalog.pg_trigger t join pg_catalog.pg_proc p on p.oid = t.tgfoid
   where t.tgrelid = ${literal(target)}::regclass and not t.tgisinternal
     and p.pronamespace = ${literal(reaSchema)}::regnamespace and p.proname <> ${literal(name)}
     and pg_catalog.strpos(p.prosrc, ${literal(EVENTS_INSERT(reaSchema))}) > 0
   order by t.tgname
   limit 1;
  if found then
    raise exception using errcode = 'duplicate_object',
      message = pg_catalog.format('table %s already has a rea capture, trigger %I of function %s.%I(); a second one would record each change twice. Remove that capture first (rea capture --table %s --name %s --down --apply runs its down script), or give this one its name, %s, to change its definition',
        ${literal(target)}::regclass, existing.tgname, ${literal(reaSchema)}, existing.proname, ${literal(options.table)}, existing.proname, existing.proname);
  end if;
end
`;
  const checkTag = dollarTag(check, 'rea_check');
  const up = `-- Fail here, not at the first business write, if a column is misspelt or rea's migrations are missing.
select ${checkedColumns} from ${target} limit 0;
select ${reaSchema}.uuid_v7() from ${reaSchema}.events limit 0;
do ${checkTag}${check}${checkTag};

create or replace function ${fn}() returns trigger
language plpgsql
-- Pinned so that objects on the writer's search_path cannot stand in for built-ins.
set search_path = pg_catalog, pg_temp
as ${tag}${body}${tag};

-- Dropped first so that running a changed definition again leaves exactly the triggers it names.
${dropTriggers}
${createTriggers.join('\n')}
`;
  return { up, down: captureRemovalSql({ schema: options.schema, table: options.table, name }) };
}

/** What removes a capture: rea's schema, the table as `up` was given it, and optionally the capture's name. */
export interface CaptureRemovalOptions {
  schema?: string;
  /** 'orders' (resolved by search_path when the script runs, as `up` resolves it) or 'public.orders'. */
  table: string;
  /** Only the capture of this name; without it, whichever rea capture the table has (up allows one). */
  name?: string;
}

/**
 * The triggers of a table's rea capture, found by what they are (a trigger on the table whose
 * function, in rea's schema, inserts into its events table), not by a name derived from how the
 * table was spelt: `orders` and `public.orders` give different default names, and removal by
 * name found nothing under the other spelling. Columns: table_found, trigger, function (its
 * signature); one row with trigger null when the table has none, table_found false when the
 * table does not exist.
 */
export function captureFindSql(options: CaptureRemovalOptions): string {
  const { reaSchema, target, name } = checkRemoval(options);
  return `select c.oid is not null as table_found, t.tgname::text as trigger, t.tgfoid::regprocedure::text as function
  from (select pg_catalog.to_regclass(${literal(target)}) as oid) c
  left join pg_catalog.pg_trigger t on t.tgrelid = c.oid and not t.tgisinternal and t.tgfoid in (${captureFunctions(reaSchema, name)})
 order by t.tgname`;
}

/**
 * One statement (a DO block) that drops the triggers captureFindSql finds, then each of their
 * functions that no trigger uses any more; with a name, that function even when the table is gone.
 * Running it again, or on a table without a capture (or no table), does nothing.
 */
export function captureRemovalSql(options: CaptureRemovalOptions): string {
  const { reaSchema, target, name } = checkRemoval(options);
  // The function goes with its last trigger: one definition may serve the same unqualified table
  // in several schemas, and removing it from one of them must not fail on (or break) the others.
  const body = `
declare
  target regclass := pg_catalog.to_regclass(${literal(target)});
  capture record;
  fns oid[] := ${name === undefined ? "'{}'" : `pg_catalog.array_remove(array[pg_catalog.to_regprocedure(${literal(`${reaSchema}.${quoteIdent(name)}()`)})::oid], null)`};
  fn oid;
begin
  for capture in
    select t.tgname, t.tgfoid from pg_catalog.pg_trigger t
     where t.tgrelid = target and not t.tgisinternal and t.tgfoid in (${captureFunctions(reaSchema, name)})
  loop
    execute pg_catalog.format('drop trigger %I on %s', capture.tgname, target);
    fns := fns || capture.tgfoid;
  end loop;
  foreach fn in array fns loop
    -- (each trigger brought its function: once dropped, the others skip it)
    if exists (select from pg_catalog.pg_proc where oid = fn) and not exists (select from pg_catalog.pg_trigger where tgfoid = fn) then
      execute pg_catalog.format('drop function if exists %s', fn::regprocedure);
    end if;
  end loop;
end
`;
  const tag = dollarTag(body, 'rea_down');
  return `do ${tag}${body}${tag};\n`;
}

function checkRemoval(options: CaptureRemovalOptions): { reaSchema: string; target: string; name: string | undefined } {
  const reaSchema = checkSchema(options.schema ?? 'rea');
  const target = checkTable(options.table).quoted;
  const name = options.name === undefined ? undefined : checkIdentifier('name', options.name, MAX_NAME_BYTES);
  return { reaSchema, target, name };
}

/** The oids of rea's capture functions (of one name, when given): what up's check calls a capture. */
function captureFunctions(reaSchema: string, name: string | undefined): string {
  return `select p.oid from pg_catalog.pg_proc p
      where p.pronamespace = pg_catalog.to_regnamespace(${literal(reaSchema)}) and p.pronargs = 0
        and pg_catalog.strpos(p.prosrc, ${literal(EVENTS_INSERT(reaSchema))}) > 0${name === undefined ? '' : ` and p.proname = ${literal(name)}`}`;
}

function checkSchema(schema: string): string {
  try {
    return quoteSchema(schema);
  } catch (err) {
    throw new CaptureOptionsError('schema', (err as Error).message.replace(/^invalid option schema: /, ''));
  }
}

interface TableName {
  schema: string | undefined;
  table: string;
  quoted: string;
}

function checkTable(value: unknown): TableName {
  if (typeof value !== 'string' || value === '') throw new CaptureOptionsError('table', 'must be a table name such as orders or public.orders');
  const parts = value.split('.');
  if (parts.length > 2) throw new CaptureOptionsError('table', `'${value}' has more than one '.'; give table or schema.table`);
  const names = parts.map((p) => checkIdentifier('table', p));
  const table = names[names.length - 1] as string;
  const schema = names.length === 2 ? names[0] : undefined;
  return { schema, table, quoted: names.map(quoteIdent).join('.') };
}

function checkEventTypes(options: CaptureTriggerOptions): CaptureEventTypes {
  const { eventType, eventTypes } = options;
  if (eventType !== undefined && eventTypes !== undefined) {
    throw new CaptureOptionsError('eventType', 'give eventType or eventTypes, not both');
  }
  if (eventType !== undefined) {
    const type = checkEventType('eventType', eventType);
    return { insert: type, update: type };
  }
  if (eventTypes === undefined || typeof eventTypes !== 'object' || eventTypes === null) {
    throw new CaptureOptionsError('eventTypes', 'give eventType, or eventTypes with at least one of insert, update, delete');
  }
  const unknown = Object.keys(eventTypes).filter((k) => !(OPS as readonly string[]).includes(k));
  if (unknown.length) throw new CaptureOptionsError(`eventTypes.${unknown[0]}`, 'is not an operation; use insert, update or delete');
  const out: CaptureEventTypes = {};
  for (const op of OPS) {
    const t = eventTypes[op];
    if (t !== undefined) out[op] = checkEventType(`eventTypes.${op}`, t);
  }
  if (OPS.every((op) => out[op] === undefined)) {
    throw new CaptureOptionsError('eventTypes', 'must name at least one of insert, update, delete');
  }
  return out;
}

function checkEventType(field: string, value: unknown): string {
  if (typeof value !== 'string' || value.trim() === '') throw new CaptureOptionsError(field, 'must be a non-empty string');
  // A type defineEvents would refuse can have no handler: its events would be fanned out to
  // nobody, without a word. (literal() would embed anything safely all the same.)
  if (!isEventTypeName(value)) throw new CaptureOptionsError(field, `${JSON.stringify(value)}: ${EVENT_TYPE_RULE}, as in defineEvents`);
  return value;
}

function checkColumns(field: string, value: unknown): string[] {
  if (!Array.isArray(value)) throw new CaptureOptionsError(field, 'must be an array of column names');
  const seen = new Set<string>();
  return value.map((c, i) => {
    const col = checkIdentifier(`${field}[${i}]`, c);
    if (seen.has(col)) throw new CaptureOptionsError(`${field}[${i}]`, `'${col}' is listed twice`);
    seen.add(col);
    return col;
  });
}

function checkIdentifier(field: string, value: unknown, maxBytes = MAX_IDENTIFIER_BYTES): string {
  if (typeof value !== 'string' || value === '') throw new CaptureOptionsError(field, 'must be a non-empty identifier');
  if (!IDENTIFIER.test(value)) {
    throw new CaptureOptionsError(field, `${JSON.stringify(value)} is not a plain identifier (a letter or _, then letters, digits, _ or $)`);
  }
  if (Buffer.byteLength(value) > maxBytes) throw new CaptureOptionsError(field, `'${value}' is longer than ${maxBytes} bytes`);
  return value;
}

function defaultName(table: TableName): string {
  const name = table.schema === undefined ? `capture_${table.table}` : `capture_${table.schema}_${table.table}`;
  if (Buffer.byteLength(name) > MAX_NAME_BYTES) {
    throw new CaptureOptionsError('name', `the default '${name}' is longer than ${MAX_NAME_BYTES} bytes; give a shorter name`);
  }
  return name;
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** A string literal that means the same whatever standard_conforming_strings says. */
function literal(value: string): string {
  const body = value.replaceAll("'", "''");
  return value.includes('\\') ? `E'${body.replaceAll('\\', '\\\\')}'` : `'${body}'`;
}

function jsonObject(pairs: [key: string, value: string][]): string {
  if (pairs.length === 0) return `'{}'::jsonb`;
  const calls: string[] = [];
  for (let i = 0; i < pairs.length; i += PAIRS_PER_CALL) {
    calls.push(`jsonb_build_object(${pairs.slice(i, i + PAIRS_PER_CALL).map(([k, v]) => `${k}, ${v}`).join(', ')})`);
  }
  return calls.join(' || ');
}

/** A dollar-quote tag that does not occur in the body, so no event type can close the quote early. */
function dollarTag(body: string, base = 'rea'): string {
  let tag = `$${base}$`;
  for (let n = 1; body.includes(tag); n++) tag = `$${base}${n}$`;
  return tag;
}

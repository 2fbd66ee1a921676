// Capture triggers and uuid_v7() on real PostgreSQL and on PGlite: the exact events a table's
// writes record (up to a sentinel), what `down` removes, and which options are refused.
import { randomBytes } from 'node:crypto';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { ReaError } from '../src/core/errors.js';
import type { Queryable } from '../src/driver/types.js';
import { captureFindSql, CaptureOptionsError, captureRemovalSql, captureTriggerSql, type CaptureTriggerOptions } from '../src/drivers/postgres/capture.js';
import { runMigrations } from '../src/drivers/postgres/common.js';

const POSTGRES_URL = process.env.REA_POSTGRES_URL ?? process.env.REA_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
// In CI a missing PostgreSQL must fail the run, not quietly skip half of it.
const REQUIRE_SERVICES = process.env.REA_REQUIRE_SERVICES === '1';

async function postgresReachable(): Promise<boolean> {
  const client = new pg.Client({ connectionString: POSTGRES_URL, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

const postgresUp = await postgresReachable();

/** One connection: uuid_v7() is monotonic per session, and the sequence test relies on that. */
interface Db {
  query<R = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<R[]>;
  exec(sql: string): Promise<void>;
  migrate(schema: string): Promise<void>;
  close(): Promise<void>;
}

async function openPostgres(): Promise<Db> {
  const client = new pg.Client({ connectionString: POSTGRES_URL, connectionTimeoutMillis: 5000 });
  await client.connect();
  return {
    query: async (sql, params) => (await client.query(sql, params)).rows,
    exec: async (sql) => {
      await client.query(sql);
    },
    migrate: async (schema) => {
      // runMigrations takes a transaction-scoped advisory lock, so it needs a transaction around it.
      await client.query('begin');
      try {
        await runMigrations(client as unknown as Queryable, (sql) => client.query(sql), schema, 'the test database');
        await client.query('commit');
      } catch (err) {
        await client.query('rollback');
        throw err;
      }
    },
    close: () => client.end(),
  };
}

// One in-memory PGlite for the whole file: each test still gets its own schema.
let pglite: PGlite | undefined;
async function openPGlite(): Promise<Db> {
  pglite ??= new PGlite();
  const db = pglite;
  await db.waitReady; // start-up takes seconds: spend them in beforeAll, not in the first test
  return {
    query: async <R,>(sql: string, params?: unknown[]) => (await db.query<R>(sql, params)).rows,
    exec: async (sql) => {
      await db.exec(sql);
    },
    migrate: async (schema) => {
      await db.transaction((tx) => runMigrations(tx as unknown as Queryable, (sql) => tx.exec(sql), schema, 'PGlite'));
    },
    close: async () => {
      if (!db.closed) await db.close();
    },
  };
}

const backends = [
  { name: 'postgres', open: openPostgres, skip: !postgresUp && !REQUIRE_SERVICES },
  { name: 'pglite', open: openPGlite, skip: false },
];

interface EventRow {
  type: string;
  subject: string | null;
  payload: unknown;
  created_by: string | null;
}

const SENTINEL = 'test.sentinel';

const orderOptions = (schema: string): CaptureTriggerOptions => ({
  schema,
  table: `${schema}.orders`,
  eventTypes: { insert: 'order.created', update: 'order.updated', delete: 'order.deleted' },
  subjectColumn: 'id',
  watchColumns: ['status', 'total'],
  payloadColumns: ['id', 'status', 'total'],
});

for (const backend of backends) {
  describe.skipIf(backend.skip)(`capture triggers on ${backend.name}`, () => {
    let db: Db;

    beforeAll(async () => {
      // With REA_REQUIRE_SERVICES=1 and no server this throws, and every test below fails.
      db = await backend.open();
    });
    afterAll(async () => {
      await db?.close();
    });

    /** A fresh rea schema holding the application's orders table too; dropped when the test ends. */
    async function freshSchema(): Promise<string> {
      const schema = `cap_${randomBytes(6).toString('hex')}`;
      await db.migrate(schema);
      onTestFinished(async () => {
        await db.exec(`drop schema if exists "${schema}" cascade`);
      });
      await db.exec(`create table "${schema}".orders (id text primary key, status text, total int, updated_at timestamptz)`);
      return schema;
    }

    /** Insert the sentinel through uuid_v7() on this same session, then return what came before it. */
    async function eventsBeforeSentinel(schema: string): Promise<EventRow[]> {
      await db.exec(`insert into "${schema}".events (id, type, payload, created_by) values ("${schema}".uuid_v7(), '${SENTINEL}', '{}', 'test')`);
      const rows = await db.query<EventRow & { fanned_out_at: unknown }>(
        `select type, subject, payload, created_by, fanned_out_at from "${schema}".events order by id`,
      );
      const last = rows.at(-1);
      expect(last?.type, 'the sentinel sorts last').toBe(SENTINEL);
      expect(rows.every((r) => r.fanned_out_at === null), 'captured events wait for the relay').toBe(true);
      return rows.slice(0, -1).map(({ type, subject, payload, created_by }) => ({ type, subject, payload, created_by }));
    }

    it('records inserts, real changes and deletes in order, and nothing for an updated_at-only update', async () => {
      const schema = await freshSchema();
      await db.exec(captureTriggerSql(orderOptions(schema)).up);
      const t = `"${schema}".orders`;

      await db.exec(`insert into ${t} (id, status, total, updated_at) values ('o-1', 'new', 100, now())`);
      await db.exec(`update ${t} set status = 'paid', updated_at = now() where id = 'o-1'`);
      await db.exec(`update ${t} set updated_at = now() + interval '1 minute' where id = 'o-1'`);
      // Assigning a watched column its current value is not a change either.
      await db.exec(`update ${t} set status = 'paid', updated_at = now() + interval '2 minutes' where id = 'o-1'`);
      await db.exec(`update ${t} set total = 120 where id = 'o-1'`);
      await db.exec(`delete from ${t} where id = 'o-1'`);

      const by = `trigger:${schema}.orders`;
      expect(await eventsBeforeSentinel(schema)).toEqual([
        { type: 'order.created', subject: 'o-1', payload: { id: 'o-1', status: 'new', total: 100 }, created_by: by },
        {
          type: 'order.updated',
          subject: 'o-1',
          payload: { before: { id: 'o-1', status: 'new', total: 100 }, after: { id: 'o-1', status: 'paid', total: 100 } },
          created_by: by,
        },
        {
          type: 'order.updated',
          subject: 'o-1',
          payload: { before: { id: 'o-1', status: 'paid', total: 100 }, after: { id: 'o-1', status: 'paid', total: 120 } },
          created_by: by,
        },
        { type: 'order.deleted', subject: 'o-1', payload: { id: 'o-1', status: 'paid', total: 120 }, created_by: by },
      ]);
    });

    it('filters updates in the trigger WHEN clause, so a no-op update never calls the function', async () => {
      const schema = await freshSchema();
      await db.exec(captureTriggerSql(orderOptions(schema)).up);
      const defs = await db.query<{ tgname: string; def: string }>(
        `select tgname, pg_get_triggerdef(oid) as def from pg_trigger
         where tgrelid = '"${schema}".orders'::regclass and not tgisinternal order by tgname`,
      );
      expect(defs.map((d) => d.tgname)).toEqual([`capture_${schema}_orders_delete`, `capture_${schema}_orders_insert`, `capture_${schema}_orders_update`]);
      const update = defs.find((d) => d.tgname.endsWith('_update'))?.def ?? '';
      expect(update).toMatch(/AFTER UPDATE .* WHEN \(\(\(\(old\.status IS DISTINCT FROM new\.status\) OR \(old\.total IS DISTINCT FROM new\.total\)\) AND \(num_nulls\(new\.id, new\.status, new\.total\) >= 0\)\)\)/);
    });

    // A payload column the triggers did not depend on could be dropped; every later insert,
    // update and delete of the table then failed (record "new" has no field "total").
    it('refuses to drop or retype a column the capture carries, and a rename fails the business write rather than record a null', async () => {
      const schema = await freshSchema();
      const t = `"${schema}".orders`;
      await db.exec(captureTriggerSql({ ...orderOptions(schema), watchColumns: ['status'] }).up);
      await expect(db.exec(`alter table ${t} drop column total`)).rejects.toThrow(/cannot drop column total of table (\S+\.)?orders because other objects depend on it/);
      await expect(db.exec(`alter table ${t} alter column total type bigint`)).rejects.toThrow(/cannot alter type of a column used in a trigger definition/);
      await expect(db.exec(`alter table ${t} drop column id`)).rejects.toThrow(/other objects depend on it/);
      await db.exec(`insert into ${t} (id, status, total) values ('o-1', 'new', 1)`);
      await db.exec(`delete from ${t}`);
      expect((await eventsBeforeSentinel(schema)).map((e) => e.type)).toEqual(['order.created', 'order.deleted']);

      // PostgreSQL does not track the function body's names: a rename is accepted, and the
      // write fails loudly (no event recorded with a null in place of the column).
      await db.exec(`alter table ${t} rename column total to amount`);
      await expect(db.exec(`insert into ${t} (id, status, amount) values ('o-2', 'new', 2)`)).rejects.toThrow(/record "new" has no field "total"/);
      // Running up again with the new name, as the README says to in the same migration, mends it.
      await db.exec(captureTriggerSql({ ...orderOptions(schema), watchColumns: ['status'], payloadColumns: ['id', 'status', 'amount'] }).up);
      await db.exec(`insert into ${t} (id, status, amount) values ('o-2', 'new', 2)`);
      expect((await eventsBeforeSentinel(schema)).at(-1)?.payload).toEqual({ id: 'o-2', status: 'new', amount: 2 });
    });

    it('gives rows written by one statement increasing ids in row order', async () => {
      const schema = await freshSchema();
      await db.exec(captureTriggerSql(orderOptions(schema)).up);
      await db.exec(`insert into "${schema}".orders (id, status, total) select 'o-' || lpad(g::text, 3, '0'), 'new', g from generate_series(1, 200) g`);
      const events = await eventsBeforeSentinel(schema);
      expect(events.map((e) => e.subject)).toEqual(Array.from({ length: 200 }, (_, i) => `o-${String(i + 1).padStart(3, '0')}`));
    });

    it('with one eventType captures inserts and updates under it, and not deletes', async () => {
      const schema = await freshSchema();
      const { eventTypes: _, ...rest } = orderOptions(schema);
      await db.exec(captureTriggerSql({ ...rest, eventType: 'order.changed', payloadColumns: ['status'] }).up);
      const t = `"${schema}".orders`;
      await db.exec(`insert into ${t} (id, status, total) values ('o-1', 'new', 1)`);
      await db.exec(`update ${t} set status = 'paid' where id = 'o-1'`);
      await db.exec(`delete from ${t}`);
      const by = `trigger:${schema}.orders`;
      expect(await eventsBeforeSentinel(schema)).toEqual([
        { type: 'order.changed', subject: 'o-1', payload: { status: 'new' }, created_by: by },
        { type: 'order.changed', subject: 'o-1', payload: { before: { status: 'new' }, after: { status: 'paid' } }, created_by: by },
      ]);
    });

    it('resolves an unqualified table through search_path, quotes mixed-case names and casts the subject to text', async () => {
      const schema = await freshSchema();
      await db.exec(`create table "${schema}"."Tickets" ("Id" bigint primary key, "State" text)`);
      await db.exec(`set search_path to "${schema}"`);
      try {
        await db.exec(
          captureTriggerSql({
            schema,
            table: 'Tickets',
            eventTypes: { update: 'ticket.moved' },
            subjectColumn: 'Id',
            watchColumns: ['State'],
            payloadColumns: ['Id', 'State'],
          }).up,
        );
        await db.exec(`insert into "Tickets" values (42, 'open')`);
        await db.exec(`update "Tickets" set "State" = 'closed'`);
      } finally {
        await db.exec('reset search_path');
      }
      expect(await eventsBeforeSentinel(schema)).toEqual([
        {
          type: 'ticket.moved',
          subject: '42',
          payload: { before: { Id: 42, State: 'open' }, after: { Id: 42, State: 'closed' } },
          created_by: 'trigger:Tickets',
        },
      ]);
    });

    it('embeds event types verbatim, with every character defineEvents allows', async () => {
      const schema = await freshSchema();
      await db.exec(captureTriggerSql({ ...orderOptions(schema), eventTypes: { insert: 'Order:v2.created_x-1', delete: '9.deleted' } }).up);
      // plpgsql parses the body's statements at their first run, so the writes belong in here too.
      await db.exec(`insert into "${schema}".orders (id) values ('o-1')`);
      await db.exec(`delete from "${schema}".orders`);
      expect((await eventsBeforeSentinel(schema)).map((e) => e.type)).toEqual(['Order:v2.created_x-1', '9.deleted']);
    });

    it('up can run again, and down removes the triggers and the function', async () => {
      const schema = await freshSchema();
      const sql = captureTriggerSql(orderOptions(schema));
      await db.exec(sql.up);
      await db.exec(sql.up);
      const t = `"${schema}".orders`;
      await db.exec(`insert into ${t} (id, status, total) values ('o-1', 'new', 1)`);

      await db.exec(sql.down);
      await db.exec(`insert into ${t} (id, status, total) values ('o-2', 'new', 2)`);
      await db.exec(`update ${t} set status = 'paid'`);
      await db.exec(`delete from ${t}`);
      expect((await eventsBeforeSentinel(schema)).map((e) => `${e.type} ${e.subject}`)).toEqual(['order.created o-1']);

      const triggers = await db.query(`select 1 from pg_trigger where tgrelid = '${t}'::regclass and not tgisinternal`);
      expect(triggers).toEqual([]);
      const functions = await db.query(
        `select 1 from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = $1 and p.proname like 'capture%'`,
        [schema],
      );
      expect(functions).toEqual([]);
      await db.exec(sql.down); // and down tolerates running twice
    });

    // Removal looked for triggers by the name the table's spelling gave: applied as schema.orders
    // (capture_<schema>_orders), a down for 'orders' dropped capture_orders_* (none) and the
    // CLI said 'removed'.
    it('removal finds the table\'s capture whichever way the table is spelt, and says when there is none', async () => {
      const schema = await freshSchema();
      await db.exec(`create table "${schema}".plain (id text primary key)`);
      await db.exec(captureTriggerSql(orderOptions(schema)).up);
      const found = async (table: string, name?: string) => db.query<{ table_found: boolean; trigger: string | null; function: string | null }>(captureFindSql({ schema, table, name }));
      await db.exec(`set search_path to "${schema}"`);
      try {
        const all = await found('orders');
        expect(all.map((r) => [r.table_found, r.trigger])).toEqual(['delete', 'insert', 'update'].map((op) => [true, `capture_${schema}_orders_${op}`]));
        expect(await found('orders', 'capture_orders')).toEqual([{ table_found: true, trigger: null, function: null }]);
        expect(await found('plain')).toEqual([{ table_found: true, trigger: null, function: null }]);
        expect(await found('nosuch')).toEqual([{ table_found: false, trigger: null, function: null }]);
        expect(await found(`nosuch_${schema}.orders`)).toEqual([{ table_found: false, trigger: null, function: null }]);

        await db.exec(captureRemovalSql({ schema, table: 'orders' }));
        await db.exec(captureRemovalSql({ schema, table: 'orders' })); // again: nothing left, no error
        await db.exec(captureRemovalSql({ schema, table: 'nosuch' })); // no table: no error either
      } finally {
        await db.exec('reset search_path');
      }
      expect(await db.query(`select 1 from pg_trigger where tgrelid = '"${schema}".orders'::regclass and not tgisinternal`)).toEqual([]);
      expect(await db.query(`select 1 from pg_proc where pronamespace = '"${schema}"'::regnamespace and proname like 'capture%'`)).toEqual([]);
      await db.exec(`insert into "${schema}".orders (id, status) values ('o-1', 'new')`);
      expect(await eventsBeforeSentinel(schema)).toEqual([]);
    });

    it('up refuses a name that another table\'s capture uses, instead of swapping the function under its triggers', async () => {
      const schema = await freshSchema();
      await db.exec(`create table "${schema}".refunds (id text primary key, state text)`);
      await db.exec(captureTriggerSql({ ...orderOptions(schema), name: 'shared' }).up);
      const refunds: CaptureTriggerOptions = {
        schema, table: `${schema}.refunds`, eventTypes: { update: 'refund.updated' }, subjectColumn: 'id', watchColumns: ['state'], payloadColumns: ['state'], name: 'shared',
      };
      // It was replaced: the orders' triggers then ran the refunds' body, and every write to
      // orders failed on a column it lacks (record "new" has no field "state").
      await expect(db.exec(captureTriggerSql(refunds).up)).rejects.toThrow(
        `capture function "${schema}"."shared"() already serves the triggers of table ${schema}.orders, with another definition`,
      );
      await db.exec(`insert into "${schema}".orders (id, status, total) values ('o-1', 'new', 1)`);
      await db.exec(`update "${schema}".orders set status = 'paid'`);
      expect((await eventsBeforeSentinel(schema)).map((e) => `${e.type} ${e.subject}`)).toEqual(['order.created o-1', 'order.updated o-1']);
      // The same table again (a changed definition) is still fine, and so is a name of its own.
      await db.exec(captureTriggerSql({ ...orderOptions(schema), name: 'shared', watchColumns: ['total'] }).up);
      await db.exec(captureTriggerSql({ ...refunds, name: 'refunds' }).up);
    });

    it('up refuses a second capture of a table under another name, naming the trigger it has and how to remove it', async () => {
      const schema = await freshSchema();
      const first = captureTriggerSql(orderOptions(schema));
      await db.exec(first.up);
      // Both were installed, and every write to orders recorded two events, one per capture.
      await expect(db.exec(captureTriggerSql({ ...orderOptions(schema), name: 'orders_again' }).up)).rejects.toThrow(
        `table ${schema}.orders already has a rea capture, trigger capture_${schema}_orders_delete of function "${schema}".capture_${schema}_orders(); `
        + `a second one would record each change twice. Remove that capture first (rea capture --table ${schema}.orders --name capture_${schema}_orders --down --apply runs its down script), `
        + `or give this one its name, capture_${schema}_orders, to change its definition`,
      );
      const functions = () => db.query<{ proname: string }>(`select proname from pg_proc where pronamespace = '"${schema}"'::regnamespace and proname like '%again%'`);
      expect(await functions()).toEqual([]);
      await db.exec(`insert into "${schema}".orders (id, status, total) values ('o-1', 'new', 1)`);
      expect((await eventsBeforeSentinel(schema)).map((e) => `${e.type} ${e.subject}`)).toEqual(['order.created o-1']);
      // Under its own name it is a changed definition of the one capture; once that is removed, another name is fine.
      await db.exec(captureTriggerSql({ ...orderOptions(schema), watchColumns: ['status'] }).up);
      await db.exec(first.down);
      await db.exec(captureTriggerSql({ ...orderOptions(schema), name: 'orders_again' }).up);
      expect(await functions()).toEqual([{ proname: 'orders_again' }]);
    });

    it('lets one definition serve the same unqualified table in several schemas (one migration per tenant)', async () => {
      const schema = await freshSchema();
      const tenants = [`${schema}_t1`, `${schema}_t2`];
      onTestFinished(() => db.exec(tenants.map((t) => `drop schema if exists "${t}" cascade;`).join('')));
      const sql = captureTriggerSql({ ...orderOptions(schema), table: 'orders' });
      for (const tenant of tenants) {
        await db.exec(`create schema "${tenant}"; create table "${tenant}".orders (id text primary key, status text, total int)`);
        await db.exec(`set search_path to "${tenant}"`);
        try {
          await db.exec(sql.up);
          await db.exec(`insert into orders (id) values ('${tenant}')`);
        } finally {
          await db.exec('reset search_path');
        }
      }
      expect((await eventsBeforeSentinel(schema)).map((e) => e.subject)).toEqual(tenants);
      // A changed definition, run tenant by tenant, is not refused for the tenants still on the old one.
      const changed = captureTriggerSql({ ...orderOptions(schema), table: 'orders', payloadColumns: ['id', 'status'] });
      for (const tenant of tenants) {
        await db.exec(`set search_path to "${tenant}"`);
        try {
          await db.exec(changed.up);
        } finally {
          await db.exec('reset search_path');
        }
      }
      const functions = () => db.query(`select 1 from pg_proc where pronamespace = '"${schema}"'::regnamespace and proname like 'capture%'`);
      // Removed from one tenant, it still serves the other (down failed: other objects depend on it).
      for (const [i, tenant] of tenants.entries()) {
        await db.exec(`set search_path to "${tenant}"`);
        try {
          await db.exec(sql.down);
        } finally {
          await db.exec('reset search_path');
        }
        for (const t of tenants) await db.exec(`insert into "${t}".orders (id) values ('${t}-after-${i}')`);
        expect(await functions()).toHaveLength(i === tenants.length - 1 ? 0 : 1);
      }
      const subjects = (await eventsBeforeSentinel(schema)).filter((e) => e.type !== SENTINEL).map((e) => e.subject);
      expect(subjects).toEqual([...tenants, `${tenants[1]}-after-0`]);
    });

    it('up refuses rea\'s own events table reached through search_path: its trigger would fire itself', async () => {
      const schema = await freshSchema();
      await db.exec(`set search_path to "${schema}"`);
      try {
        const up = captureTriggerSql({ schema, table: 'events', eventTypes: { insert: 'loop.made' }, subjectColumn: 'id', watchColumns: [], payloadColumns: ['type'] }).up;
        await expect(db.exec(up)).rejects.toThrow(`table events is one of rea's own tables: capture triggers are for application tables`);
      } finally {
        await db.exec('reset search_path');
      }
      // Without the refusal, this insert failed with "stack depth limit exceeded".
      expect(await eventsBeforeSentinel(schema)).toEqual([]);
      expect(await db.query(`select 1 from pg_trigger where tgrelid = '"${schema}".events'::regclass and not tgisinternal`)).toEqual([]);
    });

    it('up fails at once on a misspelt column instead of at the first business write', async () => {
      const schema = await freshSchema();
      await expect(db.exec(captureTriggerSql({ ...orderOptions(schema), payloadColumns: ['id', 'totl'] }).up)).rejects.toThrow(/totl/);
    });

    // What the README's capture section tells operators to grant: the writer of an application
    // table needs USAGE on rea's schema besides INSERT on its events table (the trigger function
    // runs as the writer; it is not SECURITY DEFINER).
    it.skipIf(backend.name !== 'postgres')('a writer role needs USAGE on rea\'s schema and INSERT on its events, as the README says', async () => {
      const schema = await freshSchema();
      const app = `${schema}_app`;
      const role = `${schema}_writer`;
      await db.exec(`create schema "${app}"; create table "${app}".orders (id text primary key, status text, total int);
        create role ${role} login; grant usage on schema "${app}" to ${role}; grant select, insert, update on "${app}".orders to ${role}`);
      await db.exec(captureTriggerSql({ ...orderOptions(schema), table: `${app}.orders` }).up);
      const url = new URL(POSTGRES_URL);
      url.username = role;
      url.password = '';
      const writer = new pg.Client({ connectionString: url.toString() });
      await writer.connect();
      onTestFinished(async () => {
        await writer.end();
        await db.exec(`drop schema if exists "${app}" cascade; drop owned by ${role}; drop role if exists ${role}`);
      });
      const write = (id: string) => writer.query(`insert into "${app}".orders (id, status, total) values ($1, 'new', 1)`, [id]);
      await db.exec(`grant insert on "${schema}".events to ${role}`);
      await expect(write('A1'), 'INSERT on the events table alone is not enough').rejects.toThrow(`permission denied for schema ${schema}`);
      await db.exec(`grant usage on schema "${schema}" to ${role}`);
      await write('A2');
      expect(await db.query(`select subject from "${schema}".events`)).toEqual([{ subject: 'A2' }]);
    });

    it('uuid_v7() makes version 7 ids that carry the current time and strictly increase', async () => {
      const schema = await freshSchema();
      const before = Date.now();
      const rows = await db.query<{ id: string }>(`select "${schema}".uuid_v7()::text as id from generate_series(1, 2000) g order by g`);
      const next = await db.query<{ id: string }>(`select "${schema}".uuid_v7()::text as id`);
      const after = Date.now();
      const ids = [...rows, ...next].map((r) => r.id);

      for (const id of ids) {
        expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      }
      for (let i = 1; i < ids.length; i++) {
        // Same-length lower-case hex compares like the bytes, which is how Postgres orders uuid.
        expect(ids[i]! > ids[i - 1]!, `id ${i} sorts after id ${i - 1}`).toBe(true);
      }
      const ms = (id: string) => parseInt(id.replace(/-/g, '').slice(0, 12), 16);
      // The server shares this machine's clock; the slack covers rounding and a slow CI box.
      expect(ms(ids[0]!)).toBeGreaterThanOrEqual(before - 1000);
      expect(ms(ids.at(-1)!)).toBeLessThanOrEqual(after + 1000);
      expect(ms(ids.at(-1)!)).toBeGreaterThanOrEqual(ms(ids[0]!));
    });
  });
}

describe('captureTriggerSql option checks', () => {
  const good: CaptureTriggerOptions = {
    table: 'public.orders',
    eventTypes: { insert: 'order.created', update: 'order.updated' },
    subjectColumn: 'id',
    watchColumns: ['status'],
    payloadColumns: ['id', 'status'],
  };

  it('accepts good options, defaulting to the rea schema', () => {
    const { up, down } = captureTriggerSql(good);
    expect(up).toContain('"rea"."capture_public_orders"()');
    expect(up).toContain('insert into "rea".events');
    expect(up).toContain('after update on "public"."orders"');
    expect(up).not.toContain('after delete');
    expect(down).toContain(`pg_catalog.to_regclass('"public"."orders"')`);
    expect(down).toContain(`and p.proname = 'capture_public_orders'`);
  });

  const cases: [string, Partial<Record<keyof CaptureTriggerOptions, unknown>>, string][] = [
    ['a bad rea schema', { schema: 'Rea-x' }, 'schema'],
    ['an empty table', { table: '' }, 'table'],
    ['an injected table', { table: 'orders; drop table users' }, 'table'],
    ['a three-part table', { table: 'db.public.orders' }, 'table'],
    // Its trigger on rea's events would fire itself until the stack ran out, failing every record().
    ['a table of rea\'s own', { table: 'rea.events' }, 'table'],
    ['a table of rea\'s own, in another schema', { schema: 'rea_x', table: 'rea_x.jobs' }, 'table'],
    ['a quoted table', { table: '"orders"' }, 'table'],
    ['a bad subject column', { subjectColumn: 'id::text' }, 'subjectColumn'],
    ['a bad watched column', { watchColumns: ['status', 'total)'] }, 'watchColumns[1]'],
    ['a repeated watched column', { watchColumns: ['status', 'status'] }, 'watchColumns[1]'],
    ['no watched column while capturing updates', { watchColumns: [] }, 'watchColumns'],
    ['a bad payload column', { payloadColumns: ['id', 'st"atus'] }, 'payloadColumns[1]'],
    ['a non-array payload', { payloadColumns: 'id' }, 'payloadColumns'],
    ['a too-long column', { payloadColumns: ['c'.repeat(64)] }, 'payloadColumns[0]'],
    ['a bad name', { name: 'cap ture' }, 'name'],
    ['a name too long for the trigger suffix', { name: 'n'.repeat(57) }, 'name'],
    ['a default name too long', { table: `${'s'.repeat(30)}.${'t'.repeat(30)}` }, 'name'],
    ['both eventType and eventTypes', { eventType: 'order.changed' }, 'eventType'],
    ['neither eventType nor eventTypes', { eventTypes: undefined }, 'eventTypes'],
    ['empty eventTypes', { eventTypes: {} }, 'eventTypes'],
    ['an unknown operation', { eventTypes: { insert: 'a', truncate: 'b' } }, 'eventTypes.truncate'],
    ['an empty event type', { eventTypes: { update: ' ' } }, 'eventTypes.update'],
    ['a NUL in an event type', { eventTypes: { insert: 'a\0b' } }, 'eventTypes.insert'],
    // No handler could subscribe to these: their events would be fanned out to nobody.
    ['an event type with a space', { eventType: 'order created', eventTypes: undefined }, 'eventType'],
    ['an event type with quotes', { eventTypes: { insert: `it's "x"` } }, 'eventTypes.insert'],
    ['an event type with a dollar tag', { eventTypes: { delete: 'a$rea$b' } }, 'eventTypes.delete'],
    ['an event type starting with a dot', { eventTypes: { update: '.order' } }, 'eventTypes.update'],
  ];

  it.each(cases)('refuses %s, naming the field', (_, change, field) => {
    let caught: unknown;
    try {
      captureTriggerSql({ ...good, ...change } as CaptureTriggerOptions);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(CaptureOptionsError);
    expect(caught).toBeInstanceOf(ReaError);
    expect((caught as CaptureOptionsError).code).toBe('ERR_OPTIONS');
    expect((caught as CaptureOptionsError).field).toBe(field);
    expect((caught as Error).message).toContain(field);
  });

  it('allows no watched columns when updates are not captured', () => {
    expect(() => captureTriggerSql({ ...good, eventTypes: { insert: 'order.created' }, watchColumns: [] })).not.toThrow();
  });
});

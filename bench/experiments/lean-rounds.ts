// Prototypes, not rea: four minimal workers over the same events as figure 1, to learn what the
// shape of a round costs before rea's is rebuilt (docs/fan-out-cursor.md, "What a round's shape
// costs"). `npm run bench -- --only=throughput --prototypes` runs them beside rea and the peers.
//
// Each has a handler loop of its own (no rea code at all: no leases per job, no timeouts, no
// trace scope, no logger) and the same `{ seq }` payloads, so what differs between them is the
// round; what differs from rea is rea's worker as well. None keeps every guarantee rea keeps:
// - proto-rowclaim-tx: rea's inline round reduced to its statements: BEGIN, claim 200 rows
//   (`for update skip locked`) and mark them fanned, run the handlers, COMMIT; a crash before
//   COMMIT delivers them again, as rea's does.
// - proto-rowclaim: the same claim in one autocommit statement and the handlers after it: what a
//   round costs without its transaction held open. A crash after the claim loses the round (rea
//   would need a lease row for it, which this one does not write).
// - proto-cursor: no per-row claim at all: one autocommit statement reads the next 200 events past
//   a cursor kept as pairs of snapshots (the design in docs/fan-out-cursor.md), moves the cursor,
//   writes a lease row for the range, and drops the previous round's lease. Handlers run after it.
//   A crash leaves the lease, which a rescuer (not written) would read again.
// - proto-lanes: the cursor without leases (docs/fan-out-cursor.md, "Many relays without leases:
//   lanes"): each event falls in one of LANES lanes, each lane has its own cursor row, and a round
//   takes a free lane's row (skip locked), reads its next events, moves its cursor, runs the
//   handlers and commits, all in one transaction as proto-rowclaim-tx: a crash before COMMIT
//   leaves the cursor where it was, and the events are read again at once.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { adminPool, DATABASE_URL } from '../lib/env.js';
import type { Producer, RunningWorker, System, SystemName } from '../lib/system.js';

/** Events per round, as rea's relay.batchSize; rounds in flight at once, as rea's relay.concurrency. */
const ROUND = 200;
const ROUNDS_AT_ONCE = 2;
/** Wait after a round that found nothing. */
const IDLE_MS = 5;

type Variant = 'rowclaim-tx' | 'rowclaim' | 'cursor' | 'lanes';
/** proto-lanes: how many lanes the events are spread over. */
const LANES = 8;
const q = (schema: string) => `"${schema}"`;

function uuidv7(): string {
  const b = Buffer.from(randomUUID().replace(/-/g, ''), 'hex');
  b.writeUIntBE(Date.now(), 0, 6);
  b[6] = (b[6]! & 0x0f) | 0x70;
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** The rows a round hands to its handlers, as rea's lean statement builds them (one JSON value). */
const rows = (from: string, order: string) => `json_agg(json_build_array(r.id, r.type, r.subject, r.payload, r.trace_id,
    r.created_by, r.version, (extract(epoch from r.created_at) * 1000)::float8) order by ${order}) from ${from} r`;

/**
 * A batch's next rows past the cursor `c` (its a_xids, pos_tx, pos_id and batch), `limit` of them
 * in (tx, id) order: those of prev's in-progress transactions that have finished since (a_xids),
 * then the range from `low` (one row comparison, the later of prev's xmax and the position) to the
 * batch's xmax. `where` is a condition on `e` in front of both scans (a lane), `columns` what each
 * selects, `order` each scan's order (the index's columns). Shared by the PL/pgSQL rounds
 * (snapshotBatch) and the one-statement round (lanesRoundSql).
 */
function batchScans(s: string, o: { where: string; low: [string, string]; limit: string; columns: string; order: string }): string {
  return `(select ${o.columns} from ${s}.events e where ${o.where}e.tx = any (c.a_xids) and (c.pos_tx is null or (e.tx, e.id) > (c.pos_tx, c.pos_id))
     order by ${o.order} limit ${o.limit})
    union all
    (select ${o.columns} from ${s}.events e where ${o.where}(e.tx, e.id) > (${o.low[0]}, ${o.low[1]}) and e.tx < pg_snapshot_xmax(c.batch) and pg_visible_in_snapshot(e.tx, c.batch)
     order by ${o.order} limit ${o.limit})
    order by tx, id limit ${o.limit}`;
}

/**
 * The read of proto-cursor and proto-lanes, in PL/pgSQL with `c` the cursor row: the batch's
 * snapshot taken when none is open, then the next p_limit events of the batch past the position
 * (`where`: a condition on `e` in front of both scans, for a lane), into n, res, last_tx, last_id.
 * A batch is every event whose transaction the snapshot 'batch' sees as finished and 'prev' did
 * not: those of prev's in-progress transactions that have finished (a_xids), then the range from
 * prev's xmax to batch's. The range's lower bound is one row comparison, worked out beforehand.
 */
function snapshotBatch(s: string, where: string): string {
  return `
  if c.batch is null then
    c.batch := pg_current_snapshot();
    c.a_xids := array(select x from pg_snapshot_xip(c.prev) x where pg_visible_in_snapshot(x, c.batch));
  end if;
  if c.pos_tx is null or c.pos_tx < pg_snapshot_xmax(c.prev) then
    low_tx := pg_snapshot_xmax(c.prev); low_id := '00000000-0000-0000-0000-000000000000';
  else
    low_tx := c.pos_tx; low_id := c.pos_id;
  end if;
  with batch as (
    ${batchScans(s, { where, low: ['low_tx', 'low_id'], limit: 'p_limit', columns: '*', order: 'e.tx, e.id' })}
  ), last as (select tx, id from batch order by tx desc, id desc limit 1)
  select (select count(*) from batch), (select ${rows('batch', 'r.tx, r.id')}), (select tx from last), (select id from last)
    into n, res, last_tx, last_id;`;
}

/** rea's events table (the columns a no-op handler's round reads) and what each variant claims by. */
function ddl(s: string, variant: Variant): string {
  const events = `
create schema ${s};
create table ${s}.events (
  id uuid primary key, type text not null, subject text, payload jsonb not null, trace_id text,
  created_by text, version int not null default 1, created_at timestamptz not null default now(),
  fanned_out_at timestamptz, delivered_inline text[], tx xid8 not null default pg_current_xact_id());`;
  if (variant === 'rowclaim-tx' || variant === 'rowclaim') {
    return `${events}
create index events_unfanned_idx on ${s}.events (id) where fanned_out_at is null;
create function ${s}.round(p_limit int) returns json language sql as $$
  with claimed as materialized (
    select ctid, id, type, subject, payload, trace_id, created_by, version, created_at from ${s}.events
    where fanned_out_at is null order by id limit p_limit for update skip locked
  ), fanned as (
    update ${s}.events e set fanned_out_at = now(), delivered_inline = '{noop}' from claimed c where e.ctid = c.ctid returning e.id
  )
  select json_build_object('n', (select count(*) from fanned), 'lease', null,
    'events', coalesce((select ${rows('claimed', 'r.id')}), '[]'::json))
$$;`;
  }
  if (variant === 'lanes') {
    return `${events}
alter table ${s}.events add column lane smallint not null default floor(random() * ${LANES});
create index events_lane_idx on ${s}.events (lane, tx, id);
create table ${s}.cursor (lane smallint primary key, prev pg_snapshot not null, batch pg_snapshot, a_xids xid8[], pos_tx xid8, pos_id uuid,
  updated_by xid8 not null default pg_current_xact_id());
insert into ${s}.cursor (lane, prev) select l, pg_current_snapshot() from generate_series(0, ${LANES - 1}) l;
-- The first free lane from p_start on with events past its cursor: its next events (the pairs of
-- snapshots of proto-cursor, within the lane), its cursor moved, in the caller's transaction.
create function ${s}.round(p_start int, p_limit int) returns json language plpgsql as $$
declare
  c ${s}.cursor;
  k int; l smallint;
  low_tx xid8; low_id uuid;
  n int; res json; last_tx xid8; last_id uuid;
begin
  for k in 0..${LANES - 1} loop
    l := (p_start + k) % ${LANES};
    select * into c from ${s}.cursor where lane = l for update skip locked;
    continue when not found;
${snapshotBatch(s, 'e.lane = l and ')}
    if n < p_limit then
      update ${s}.cursor set prev = c.batch, batch = null, a_xids = null, pos_tx = null, pos_id = null, updated_by = pg_current_xact_id() where lane = l;
    else
      update ${s}.cursor set batch = c.batch, a_xids = c.a_xids, pos_tx = last_tx, pos_id = last_id, updated_by = pg_current_xact_id() where lane = l;
    end if;
    if n > 0 then
      return json_build_object('n', n, 'lease', null, 'events', res);
    end if;
  end loop;
  return json_build_object('n', 0, 'lease', null, 'events', '[]'::json);
end $$;`;
  }
  return `${events}
create index events_tx_idx on ${s}.events (tx, id);
create table ${s}.cursor (name text primary key, prev pg_snapshot not null, batch pg_snapshot, a_xids xid8[], pos_tx xid8, pos_id uuid);
insert into ${s}.cursor values ('default', pg_current_snapshot(), null, null, null, null);
create table ${s}.leases (id bigint generated always as identity primary key, worker text not null, expires_at timestamptz not null,
  prev pg_snapshot not null, batch pg_snapshot not null, a_xids xid8[] not null, from_tx xid8, from_id uuid, to_tx xid8 not null, to_id uuid not null);
create function ${s}.round(p_done bigint, p_limit int, p_worker text) returns json language plpgsql as $$
declare
  c ${s}.cursor;
  low_tx xid8; low_id uuid;
  n int; res json; last_tx xid8; last_id uuid; lease bigint;
begin
  if p_done is not null then delete from ${s}.leases where id = p_done; end if;
  select * into c from ${s}.cursor where name = 'default' for update;
${snapshotBatch(s, '')}
  if n > 0 then
    insert into ${s}.leases (worker, expires_at, prev, batch, a_xids, from_tx, from_id, to_tx, to_id)
    values (p_worker, now() + interval '30 s', c.prev, c.batch, c.a_xids, c.pos_tx, c.pos_id, last_tx, last_id) returning id into lease;
  end if;
  if n < p_limit then
    update ${s}.cursor set prev = c.batch, batch = null, a_xids = null, pos_tx = null, pos_id = null where name = 'default';
  else
    update ${s}.cursor set batch = c.batch, a_xids = c.a_xids, pos_tx = last_tx, pos_id = last_id where name = 'default';
  end if;
  return json_build_object('n', n, 'lease', lease, 'events', coalesce(res, '[]'::json));
end $$;`;
}

interface Round { n: number; lease: string | null; events: unknown[][] }

function prototype(variant: Variant): System {
  return {
    name: `proto-${variant}` as SystemName,
    async unavailable() {
      return null;
    },
    async install(schema) {
      await adminPool().query(ddl(q(schema), variant));
    },
    async prefill(schema, n) {
      const c = new pg.Client({ connectionString: DATABASE_URL });
      await c.connect();
      try {
        for (let start = 0; start < n; start += 500) {
          const ids: string[] = [];
          const payloads: string[] = [];
          for (let seq = start; seq < Math.min(n, start + 500); seq++) {
            ids.push(uuidv7());
            payloads.push(JSON.stringify({ seq }));
          }
          await c.query(`insert into ${q(schema)}.events (id, type, payload) select unnest($1::uuid[]), 'bench.job', unnest($2::jsonb[])`, [ids, payloads]);
        }
      } finally {
        await c.end();
      }
    },
    async startWorker(schema, concurrency, onJob): Promise<RunningWorker> {
      const pool = new pg.Pool({ connectionString: DATABASE_URL, max: ROUNDS_AT_ONCE + 1 });
      const worker = randomUUID();
      const text = variant === 'cursor' ? `select ${q(schema)}.round($1, $2, $3) as r` : variant === 'lanes' ? `select ${q(schema)}.round($1, $2) as r` : `select ${q(schema)}.round($1) as r`;
      const handler = async (event: { payload: { seq: number } }) => {
        onJob(event.payload.seq);
      };
      // The round's events, `concurrency` handlers at a time.
      const runAll = async (events: unknown[][]) => {
        let next = 0;
        const lane = async () => {
          while (next < events.length) {
            const e = events[next++]!;
            const event = { id: e[0], type: e[1], subject: e[2], payload: e[3] as { seq: number }, traceId: e[4], createdBy: e[5], version: e[6], createdAt: new Date(e[7] as number) };
            try {
              await handler(event);
            } catch {
              // A failure would become a job row; the no-op handler never fails.
            }
          }
        };
        await Promise.all(Array.from({ length: Math.min(concurrency, events.length) }, lane));
      };
      let stopped = false;
      let rounds = 0;
      const loop = async () => {
        let done: string | null = null;
        while (!stopped) {
          let round: Round;
          if (variant === 'rowclaim-tx' || variant === 'lanes') {
            const c = await pool.connect();
            try {
              await c.query('BEGIN');
              const values = variant === 'lanes' ? [rounds++ % LANES, ROUND] : [ROUND];
              round = (await c.query({ name: 'round', text, values })).rows[0].r;
              await runAll(round.events);
              await c.query('COMMIT');
            } finally {
              c.release();
            }
          } else {
            const values = variant === 'cursor' ? [done, ROUND, worker] : [ROUND];
            round = (await pool.query({ name: 'round', text, values })).rows[0].r;
            done = round.lease;
            await runAll(round.events);
          }
          if (round.n === 0) await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
        }
        if (done) await pool.query(`delete from ${q(schema)}.leases where id = $1`, [done]);
      };
      const loops = Array.from({ length: ROUNDS_AT_ONCE }, loop);
      return {
        async stop() {
          stopped = true;
          await Promise.all(loops);
          await pool.end();
        },
      };
    },
    async remaining(schema) {
      const sql = variant === 'cursor'
        ? `select (select count(*) from ${q(schema)}.leases)
             + (select count(*) from ${q(schema)}.events e, ${q(schema)}.cursor c where not pg_visible_in_snapshot(e.tx, c.prev)) as n`
        : variant === 'lanes'
          // Read by a lane's cursor: behind its prev, or in its batch up to its position.
          ? `select count(*) as n from ${q(schema)}.events e join ${q(schema)}.cursor c on c.lane = e.lane
             where not pg_visible_in_snapshot(e.tx, c.prev)
               and not (c.batch is not null and pg_visible_in_snapshot(e.tx, c.batch) and (e.tx, e.id) <= (c.pos_tx, c.pos_id))`
          : `select count(*) as n from ${q(schema)}.events where fanned_out_at is null`;
      return Number((await adminPool().query(sql)).rows[0].n);
    },
    async completed() {
      return null;
    },
    async producer(): Promise<Producer> {
      throw new Error('the prototypes run figure 1 only');
    },
  };
}

/** proto-lanes' table, cursors and round function in schema `s` (quoted), for lanes-check.ts. */
export const lanesDdl = (s: string): string => ddl(s, 'lanes');

/**
 * proto-lanes' round as one SQL statement, no PL/pgSQL ($1 the lane to start from, $2 the limit;
 * the same JSON as round()): the shape a round inside rea's own statement would take (measured in
 * docs/fan-out-cursor.md, "The cursor inside rea's own round"), checked by lanes-check.ts --sql.
 *
 * One statement has one snapshot, and the batch's snapshot is that one when the lane has none
 * open, so every row the batch counts is visible to the statement's reads. One trap: the lane's row
 * is locked `for update skip locked`, and a row updated by a round that committed after this
 * statement's snapshot is taken in its newest version (read committed's recheck). Its position or
 * batch may then be newer than the snapshot the rows are read with, and rows of the batch would be
 * passed unread. So each round writes its transaction's id into the row (`updated_by`), and a round
 * that locked a version its own snapshot cannot see reads nothing and moves nothing (`fresh`); the
 * lane goes to the next round.
 */
export function lanesRoundSql(s: string, { windowMs = 0, guard = true }: { windowMs?: number; guard?: boolean } = {}): string {
  // For lanes-check.ts only: a pause between the statement's snapshot and its lock of the lane
  // (windowMs), in which other rounds commit, and the guard (`fresh`) switched off, to show the trap.
  const pause = windowMs > 0 ? `\n  where (select true from pg_sleep(random() * ${windowMs / 1000}))` : '';
  const zero = `'00000000-0000-0000-0000-000000000000'::uuid`;
  return `
with lane as materialized (
  select l.lane, l.prev, l.pos_tx, l.pos_id,
         ${guard ? 'pg_visible_in_snapshot(l.updated_by, pg_current_snapshot())' : 'true'} as fresh,
         coalesce(l.batch, pg_current_snapshot()) as batch,
         coalesce(l.a_xids, array(select x from pg_snapshot_xip(l.prev) x where pg_visible_in_snapshot(x, pg_current_snapshot()))) as a_xids,
         case when l.pos_tx is null or l.pos_tx < pg_snapshot_xmax(l.prev) then pg_snapshot_xmax(l.prev) else l.pos_tx end as low_tx,
         case when l.pos_tx is null or l.pos_tx < pg_snapshot_xmax(l.prev) then ${zero} else l.pos_id end as low_id
  from ${s}.cursor l${pause}
  order by (l.lane + ${LANES} - $1::int) % ${LANES}
  limit 1
  for update skip locked
), batch as materialized (
  select b.* from lane c
  cross join lateral (
    ${batchScans(s, {
      where: 'e.lane = c.lane and ', low: ['c.low_tx', 'c.low_id'], limit: '$2::int',
      columns: 'e.id, e.type, e.subject, e.payload, e.trace_id, e.created_by, e.version, e.created_at, e.tx', order: 'e.lane, e.tx, e.id',
    })}) b
  where c.fresh
), last as (
  select count(*) as n, (array_agg(tx order by tx desc, id desc))[1] as tx, (array_agg(id order by tx desc, id desc))[1] as id from batch
), moved as (
  update ${s}.cursor l
  set prev = case when m.n < $2::int then c.batch else l.prev end,
      batch = case when m.n < $2::int then null else c.batch end,
      a_xids = case when m.n < $2::int then null else c.a_xids end,
      pos_tx = case when m.n < $2::int then null else m.tx end,
      pos_id = case when m.n < $2::int then null else m.id end,
      updated_by = pg_current_xact_id()
  from lane c, last m
  where l.lane = c.lane and c.fresh
  returning 1
)
select json_build_object('n', (select n from last), 'lease', null, 'stale', (select not fresh from lane),
  'events', coalesce((select ${rows('batch', 'r.tx, r.id')}), '[]'::json)) as r`;
}
export { uuidv7 };

export const prototypes: System[] = [prototype('rowclaim-tx'), prototype('rowclaim'), prototype('cursor'), prototype('lanes')];

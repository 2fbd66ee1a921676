// A check of proto-lanes' rounds (lean-rounds.ts; docs/fan-out-cursor.md, "Many relays without
// leases: lanes"), not of rea: while producers record events in transactions that commit late, roll
// back, or stay open for seconds (one in this database recording 500 events, one in another holding
// the cluster's xmin), three consumers read rounds, each in a transaction that commits or, now and
// then, rolls back as a crashed round would. At the end every committed event must have been read
// by exactly one committed round, no rolled-back event by any, and no event may have waited for the
// long transactions. Run: node --import tsx bench/experiments/lanes-check.ts [seconds] [--sql]
// [--window=ms] [--no-guard]
// With --sql the consumers read each round by one SQL statement (lanesRoundSql) instead of
// proto-lanes' PL/pgSQL function: the same cursor, read the way a round of rea's would read it.
import pg from 'pg';
import { adminPool, closeAdmin, DATABASE_URL, dropSchema, ensureDatabase, sleep } from '../lib/env.js';
import { lanesDdl, lanesRoundSql, uuidv7 } from './lean-rounds.js';

const args = process.argv.slice(2);
const SQL = args.includes('--sql');
const SECONDS = Number(args.find((a) => !a.startsWith('--')) ?? 12);
const PRODUCERS = 12;
const CONSUMERS = 3;
const ROUND = 200;
const schema = 'lanes_check';
const s = `"${schema}"`;

const committed = new Map<number, number>(); // seq → commit time (ms)
const rolledBack = new Set<number>();
const read = new Map<number, number>(); // seq → reads by committed rounds
const waits: number[] = [];
const longSeqs = new Set<number>();
let seq = 0;
let roundsRolledBack = 0;
let roundsStale = 0; // --sql: rounds that locked a lane row newer than their snapshot, and read nothing
let producing = true;

async function client(url = DATABASE_URL): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  return c;
}

async function insert(c: pg.Client, seqs: number[]): Promise<void> {
  await c.query(`insert into ${s}.events (id, type, payload) select unnest($1::uuid[]), 'check', unnest($2::jsonb[])`,
    [seqs.map(() => uuidv7()), seqs.map((n) => JSON.stringify({ seq: n }))]);
}

async function producer(): Promise<void> {
  const c = await client();
  while (producing) {
    const seqs = Array.from({ length: 1 + Math.floor(Math.random() * 5) }, () => seq++);
    await c.query('BEGIN');
    await insert(c, seqs);
    if (Math.random() < 0.3) await sleep(Math.random() * 30);
    if (Math.random() < 0.1) {
      await c.query('ROLLBACK');
      for (const n of seqs) rolledBack.add(n);
    } else {
      await c.query('COMMIT');
      const at = Date.now();
      for (const n of seqs) committed.set(n, at);
    }
  }
  await c.end();
}

/** 500 events in one transaction of this database, committed after `ms`. */
async function longInHere(ms: number): Promise<void> {
  const c = await client();
  const seqs = Array.from({ length: 500 }, () => seq++);
  await c.query('BEGIN');
  await insert(c, seqs);
  await sleep(ms);
  await c.query('COMMIT');
  const at = Date.now();
  for (const n of seqs) {
    committed.set(n, at);
    longSeqs.add(n);
  }
  await c.end();
}

/** A transaction with an xid in another database, open for `ms`: it holds the cluster's xmin. */
async function longElsewhere(ms: number): Promise<void> {
  const c = await client(DATABASE_URL.replace(/\/[^/]*$/, '/postgres'));
  await c.query('BEGIN');
  await c.query('select pg_current_xact_id()');
  await sleep(ms);
  await c.query('COMMIT');
  await c.end();
}

// --window=ms: each round pauses up to that long (at random) between its snapshot and its lock of a lane, so that
// other rounds commit in between; --no-guard: without the check of the lane row's version. Both
// together show what the guard is for (events read twice, or lost).
const windowArg = args.find((a) => a.startsWith('--window='));
const roundText = SQL
  ? lanesRoundSql(s, { windowMs: windowArg ? Number(windowArg.split('=')[1]) : 0, guard: !args.includes('--no-guard') })
  : `select ${s}.round($1, $2) as r`;

async function consumer(k: number, until: () => boolean): Promise<void> {
  const c = await client();
  let start = k;
  while (!until()) {
    await c.query('BEGIN');
    const r = (await c.query({ name: 'round', text: roundText, values: [start++ % 8, ROUND] })).rows[0].r as { n: number; stale?: boolean; events: unknown[][] };
    if (r.stale) roundsStale++;
    if (Math.random() < 0.05) {
      await c.query('ROLLBACK'); // a round that crashed: its lane's cursor stays where it was
      roundsRolledBack++;
      continue;
    }
    await c.query('COMMIT');
    const at = Date.now();
    for (const e of r.events) {
      const n = (e[3] as { seq: number }).seq;
      read.set(n, (read.get(n) ?? 0) + 1);
      const t = committed.get(n);
      if (t !== undefined && !longSeqs.has(n)) waits.push(at - t);
    }
    if (r.n === 0) await sleep(5);
  }
  await c.end();
}

const remaining = async (): Promise<number> => Number((await adminPool().query(
  `select count(*) as n from ${s}.events e join ${s}.cursor c on c.lane = e.lane
   where not pg_visible_in_snapshot(e.tx, c.prev)
     and not (c.batch is not null and pg_visible_in_snapshot(e.tx, c.batch) and (e.tx, e.id) <= (c.pos_tx, c.pos_id))`)).rows[0].n);

await ensureDatabase();
await dropSchema(schema);
await adminPool().query(lanesDdl(s));
let draining = false;
let drained = false;
const consumers = Array.from({ length: CONSUMERS }, (_, k) => consumer(k, () => drained));
const producers = Array.from({ length: PRODUCERS }, producer);
const longs = [sleep(1000).then(() => longInHere(Math.min(8000, SECONDS * 600))), longElsewhere(Math.min(10_000, SECONDS * 800))];
await sleep(SECONDS * 1000);
producing = false;
await Promise.all([...producers, ...longs]);
draining = true;
const deadline = Date.now() + 30_000;
while ((await remaining()) > 0 && Date.now() < deadline) await sleep(20);
await sleep(200); // rounds in flight commit
drained = true;
await Promise.all(consumers);

let lost = 0;
let twice = 0;
for (const n of committed.keys()) {
  const r = read.get(n) ?? 0;
  if (r === 0) lost++;
  else if (r > 1) twice++;
}
const readRolledBack = [...rolledBack].filter((n) => read.has(n)).length;
waits.sort((a, b) => a - b);
const pct = (p: number) => waits[Math.min(waits.length - 1, Math.floor(p * waits.length))] ?? NaN;
console.log(JSON.stringify({
  round: SQL ? 'one SQL statement' : 'PL/pgSQL', committed: committed.size, rolledBack: rolledBack.size, roundsRolledBack, roundsStale, lost, readTwice: twice, rolledBackRead: readRolledBack,
  waitMs: { p50: pct(0.5), p99: pct(0.99), max: waits[waits.length - 1] }, draining,
}));
await dropSchema(schema);
await closeAdmin();
process.exit(lost === 0 && twice === 0 && readRolledBack === 0 ? 0 : 1);

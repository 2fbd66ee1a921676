// Figure 6 (rea only): the relay's claim round (claim ≤200 unfanned events, insert their jobs, mark
// them fanned) timed with little and with a lot of fanned history in the events table. The design
// promises the same cost either way, because the claim reads a partial index of live rows only.
//
// A round is timed through bus.relayOnce(), the very round the relay loop runs, on a bus whose own
// relay loop and worker are off, so nothing else claims the events under the clock.
import { adminPool, dropSchema, median, nowMs } from './lib/env.js';
import { postgresStatements } from '../src/drivers/postgres/sql.js';
import { makeBus, REA_TYPE } from './rea.js';

const ROUND = 200;

/**
 * A UUIDv7 for history row `g` (plus `offset`), made inline so millions of rows insert fast: the
 * time part counts up from a day ago, so history sorts before new events, as rea's ids would.
 * (Random v4 ids would scatter primary-key inserts over the whole index, which rea never does.)
 */
function historyId(g: string, offset: string): string {
  const n = `(${g} + ${offset})`;
  return `(lpad(to_hex((extract(epoch from now() - interval '1 day') * 1000)::bigint + ${n} / 100), 12, '0')
    || '7' || substr(md5(${n}::text), 1, 3) || '8' || substr(md5(${n}::text), 4, 15))::uuid`;
}

/** Add `count` fanned historical rows quickly: one insert … select generate_series, in chunks. */
async function addHistory(schema: string, count: number): Promise<void> {
  const chunk = 1_000_000;
  for (let done = 0; done < count; done += chunk) {
    const k = Math.min(chunk, count - done);
    await adminPool().query(
      `insert into "${schema}".events (id, type, subject, payload, created_at, fanned_out_at)
       select ${historyId('g', '$3::bigint')}, $1, 'h-' || g, jsonb_build_object('seq', g), now() - interval '1 day', now() - interval '1 day'
       from generate_series(1, $2::int) g`,
      [REA_TYPE, k, done],
    );
  }
  // Autovacuum would get there; the benchmark should not depend on when it does.
  await adminPool().query(`vacuum analyze "${schema}".events`);
}

/** Insert ROUND unfanned events with time-ordered ids, as record() makes them. */
async function addRound(schema: string): Promise<void> {
  await adminPool().query(
    `insert into "${schema}".events (id, type, subject, payload)
     select "${schema}".uuid_v7(), $1, 'r-' || g, jsonb_build_object('seq', g) from generate_series(1, $2::int) g`,
    [REA_TYPE, ROUND],
  );
}

/** One timed round: ROUND new events, then bus.relayOnce(); checks that it fanned exactly them. */
async function timeRound(bus: any, schema: string, r: number): Promise<number> {
  await addRound(schema);
  const t0 = nowMs();
  const res = await bus.relayOnce();
  const ms = nowMs() - t0;
  const { rows } = await adminPool().query(
    `select (select count(*) from "${schema}".events where fanned_out_at is null)::int as unfanned,
            (select count(*) from "${schema}".jobs)::int as jobs`,
  );
  if (res !== 'full' || rows[0].unfanned !== 0 || rows[0].jobs !== (r + 1) * ROUND) {
    throw new Error(`claim round ${r} in ${schema} returned ${res}, left ${rows[0].unfanned} unfanned, ${rows[0].jobs} jobs in all (expected ${(r + 1) * ROUND})`);
  }
  return ms;
}

/**
 * EXPLAIN (ANALYZE, BUFFERS, WAL) of one more fan-out round, rolled back: the same plan, buffers
 * and WAL on both sides is what "the claim does not read history" means.
 */
async function explainRound(schema: string, history: number): Promise<void> {
  await addRound(schema);
  const c = await adminPool().connect();
  try {
    await c.query('begin');
    const sql = postgresStatements(`"${schema}"`).eventFanOut;
    const r = await c.query(`explain (analyze, buffers, wal) ${sql}`, [ROUND, null, 18, 30_000, 300_000]);
    console.error(`--- EXPLAIN fan-out round, ${history.toLocaleString('en-US')} fanned rows\n${r.rows.map((x) => x['QUERY PLAN']).join('\n')}`);
  } finally {
    await c.query('rollback');
    c.release();
  }
}

async function claimBus(schema: string): Promise<any> {
  const bus = await makeBus(schema, { relay: { enabled: false }, worker: { enabled: false }, poolSize: 2 });
  await bus.migrate();
  // One handler, so each claimed event becomes one job, as in figure 1. start() registers it.
  bus.on(REA_TYPE, 'noop', async () => undefined);
  await bus.start();
  return bus;
}

/**
 * Two schemas, one with `small` and one with `large` fanned rows, loaded first; then their rounds
 * alternate (small, large, large, small, …), so the machine's drift over the run and the
 * checkpoint after the big load fall on both sides alike.
 */
export async function claimCost(schema: string, small: number, large: number, rounds: number, explain = false): Promise<{ smallMs: number; largeMs: number }> {
  const smallSchema = `${schema}_small`;
  await dropSchema(smallSchema);
  const sides = [
    { schema: smallSchema, bus: await claimBus(smallSchema), history: small, times: [] as number[] },
    { schema, bus: await claimBus(schema), history: large, times: [] as number[] },
  ];
  try {
    for (const side of sides) await addHistory(side.schema, side.history);
    // The big load leaves dirty buffers and WAL; flush them now, not in the middle of the rounds.
    await adminPool().query('checkpoint');
    const WARM = 3; // the first rounds warm the plan cache and the buffer pool
    for (let r = 0; r < rounds + WARM; r++) {
      for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
        const ms = await timeRound(side.bus, side.schema, r);
        if (r >= WARM) side.times.push(ms);
      }
    }
    if (explain) for (const side of sides) await explainRound(side.schema, side.history);
    return { smallMs: median(sides[0]!.times), largeMs: median(sides[1]!.times) };
  } finally {
    for (const side of sides) await side.bus.stop();
    await dropSchema(smallSchema);
  }
}

// Where rea's figure-1 work goes in the database: the three statements every job passes through
// by default (the relay's fan-out, the worker's claim, the batched completion), and the one an
// inline round runs instead of all three (relay.inlineMs) and its lean form, each run alone in
// rounds of 200 over N pre-recorded events, timed and charged with the server's CPU per row. The
// numbers the README's "why is figure 1 where it is" points at; EXPLAIN (ANALYZE, BUFFERS, WAL) of one round of
// each is printed with `--explain`.
import pg from 'pg';
import { BEGIN_OWN } from '../src/drivers/postgres/driver.js';
import { jobClaimParams } from '../src/drivers/postgres/executor.js';
import { postgresStatements } from '../src/drivers/postgres/sql.js';
import { DATABASE_URL, dropSchema } from './lib/env.js';
import { serverCpuSeconds } from './lib/server-cpu.js';
import { makeBus, REA_TYPE } from './rea.js';

export interface StatementCost {
  statement: 'fan-out' | 'claim' | 'complete' | 'inline-fan-out' | 'lean-inline-fan-out';
  rows: number;
  wallUsPerRow: number;
  serverCpuUsPerRow: number | null;
}

const ROUND = 200;

export async function profileStatements(schema: string, n: number, explain = false): Promise<StatementCost[]> {
  await dropSchema(schema);
  const bus = await makeBus(schema, { relay: { enabled: false }, worker: { enabled: false } });
  bus.on(REA_TYPE, 'noop', async () => undefined);
  await bus.migrate();
  await bus.start(); // registers the handler row the fan-out routes by
  for (let s = 0; s < n; s += 500) {
    const batch = Array.from({ length: Math.min(500, n - s) }, (_, k) => ({ type: REA_TYPE, payload: { seq: s + k } }));
    await bus.transaction((tx: unknown) => bus.recordMany(tx, batch));
  }
  await bus.stop();

  const sql = postgresStatements(`"${schema}"`);
  const c = new pg.Client({ connectionString: DATABASE_URL, application_name: 'rea-bench-profile' });
  await c.connect();
  const out: StatementCost[] = [];
  try {
    await c.query(`vacuum analyze "${schema}".events`);
    const fanOut = { name: 'p_fan_out', text: sql.eventFanOut, values: [ROUND, null, 18, 30_000, 300_000] };
    const claim = { name: 'p_claim', text: sql.jobClaim, values: jobClaimParams({ workerId: 'profile', targets: [{ kind: 'handler', target: 'noop', limit: ROUND, leaseMs: 35_000 }], limit: ROUND, now: null }).values };
    if (explain) {
      // One round of each inside a rolled-back transaction, so the measured rounds start from the same rows.
      for (const [label, q] of [['fan-out', fanOut], ['claim (after one fan-out)', claim]] as const) {
        await c.query('begin');
        if (label.startsWith('claim')) await c.query(fanOut.text, fanOut.values);
        const r = await c.query(`explain (analyze, buffers, wal) ${q.text}`, q.values);
        await c.query('rollback');
        console.error(`--- EXPLAIN ${label}\n${r.rows.map((x) => x['QUERY PLAN']).join('\n')}`);
      }
    }
    const measure = async (statement: StatementCost['statement'], round: () => Promise<number>) => {
      const cpu0 = serverCpuSeconds();
      const t0 = performance.now();
      let rows = 0;
      for (let got = await round(); got > 0; got = await round()) rows += got;
      const wall = performance.now() - t0;
      const cpu1 = serverCpuSeconds();
      out.push({
        statement, rows, wallUsPerRow: (wall * 1000) / rows,
        serverCpuUsPerRow: cpu0 !== null && cpu1 !== null ? ((cpu1 - cpu0) * 1e6) / rows : null,
      });
    };
    await measure('fan-out', async () => (await c.query(fanOut)).rows[0].jobs);
    const claimed: { id: string; attempt: number }[] = [];
    await measure('claim', async () => {
      const r = await c.query(claim);
      claimed.push(...r.rows);
      return r.rows.length;
    });
    let at = 0;
    await measure('complete', async () => {
      const batch = claimed.slice(at, (at += ROUND));
      if (batch.length === 0) return 0;
      const r = await c.query({ name: 'p_complete', text: sql.jobCompleteMany, values: [batch.map((j) => j.id), batch.map((j) => j.attempt), null] });
      return r.rowCount ?? 0;
    });
    const left = await c.query(`select count(*)::int as n from "${schema}".jobs where state <> 'completed'`);
    if (out[0]!.rows !== n || left.rows[0].n !== 0) throw new Error(`profile: fanned ${out[0]!.rows} of ${n}; ${left.rows[0].n} jobs not completed`);

    // The same events unfanned again, for an inline round: one statement in its transaction, no
    // job row (every inline delivery is taken to succeed, as in figure 1, so no finishing statement).
    await c.query(`update "${schema}".events set fanned_out_at = null`);
    await c.query(`vacuum analyze "${schema}".events`);
    const inline = {
      name: 'p_inline', text: sql.eventFanOutInline,
      values: [ROUND, null, 18, 30_000, 300_000, 'profile', ['noop'], [ROUND], ROUND, [35_000], [true], '10000'],
    };
    if (explain) {
      await c.query('begin');
      const r = await c.query(`explain (analyze, buffers, wal) ${inline.text}`, inline.values);
      await c.query('rollback');
      console.error(`--- EXPLAIN inline fan-out\n${r.rows.map((x) => x['QUERY PLAN']).join('\n')}`);
    }
    await measure('inline-fan-out', async () => {
      // As rea begins an inline round: its statements planned once (generic), not at every round.
      await c.query(BEGIN_OWN);
      const r = await c.query(inline);
      await c.query('commit');
      return r.rows[0].event_ids ? (r.rows[0].event_ids as string).split(',').length : 0;
    });
    const inlined = await c.query(`select count(*)::int as n from "${schema}".events where 'noop' = any (delivered_inline)`);
    if (inlined.rows[0].n !== n) throw new Error(`profile: ${inlined.rows[0].n} of ${n} events delivered inline`);

    // And the lean inline round, the one figure 1's rounds run (every event routes only to this
    // process's inline handler): claim, one update, routing once per event type.
    await c.query(`update "${schema}".events set fanned_out_at = null, delivered_inline = null`);
    await c.query(`vacuum analyze "${schema}".events`);
    const lean = {
      name: 'p_inline_lean', text: sql.eventFanOutInlineLean,
      values: [ROUND, null, ['noop'], [ROUND], ROUND, [35_000], [true], '10000'],
    };
    if (explain) {
      await c.query('begin');
      const r = await c.query(`explain (analyze, buffers, wal) ${lean.text}`, lean.values);
      await c.query('rollback');
      console.error(`--- EXPLAIN lean inline fan-out\n${r.rows.map((x) => x['QUERY PLAN']).join('\n')}`);
    }
    await measure('lean-inline-fan-out', async () => {
      await c.query(BEGIN_OWN);
      const r = await c.query(lean);
      await c.query('commit');
      if (r.rows[0].lean !== true) throw new Error('profile: the lean inline round did not apply');
      // Its events: those handed to the handler, and those no handler takes (none here).
      return (r.rows[0].handed_events as unknown[]).length + (r.rows[0].unrouted_ids ? (r.rows[0].unrouted_ids as string).split(',').length : 0);
    });
    const leanInlined = await c.query(`select count(*)::int as n from "${schema}".events where delivered_inline = '{noop}'`);
    if (leanInlined.rows[0].n !== n) throw new Error(`profile: ${leanInlined.rows[0].n} of ${n} events delivered inline by the lean round`);
  } finally {
    await c.end();
    await dropSchema(schema);
  }
  return out;
}

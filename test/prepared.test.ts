// rea's own statements are prepared by name on each connection (src/drivers/postgres/prepared.ts):
// parsed and planned once per connection, not once per round, claim or completion. The relay's
// round is the longest of them (a hundred lines of CTEs); planned again on every round it cost the
// server ~2 ms a round of 200 events.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineEvents } from '../src/index.js';
import { postgresStatements } from '../src/drivers/postgres/sql.js';
import { PG_URL, postgresTarget, testBus } from './helpers/db.js';
import { counter } from './helpers/signals.js';

const events = defineEvents({ 'order.created': z.object({ n: z.number() }) });

/** The statements prepared on the one connection of a bus whose pool holds one. */
async function preparedOn(bus: { driver: { query<R>(sql: string): Promise<{ rows: R[] }> } }): Promise<Set<string>> {
  const { rows } = await bus.driver.query<{ statement: string }>('select statement from pg_prepared_statements');
  return new Set(rows.map((r) => r.statement));
}

describe.runIf(postgresTarget.available)('prepared statements on PostgreSQL', () => {
  it('the relay\'s round, the worker\'s claim and its completions are prepared on the connection that runs them', async () => {
    // One pool connection: the relay's rounds, the worker's claims and completions all run on it,
    // and pg_prepared_statements (which lists the session's own) shows what was prepared there.
    const bus = await testBus(postgresTarget, events, { database: { postgres: PG_URL, poolSize: 1 } });
    const sql = postgresStatements(`"${bus.schema}"`);
    // Recorded before the start, 300 events: full rounds that queue jobs, so the worker claims them
    // (the relay hands jobs over in memory only while none waits in the queue).
    await bus.transaction((tx) => bus.recordMany(tx, Array.from({ length: 300 }, (_, n) => ({ type: 'order.created' as const, payload: { n } }))));
    const done = counter(300);
    bus.on('order.created', 'mailer', () => done.tick());
    await bus.start();
    await done.done;
    // The round with hand-off (the default); then a plain one, once the worker has no room.
    await expect.poll(async () => (await preparedOn(bus)).has(sql.eventFanOutHandOff), { timeout: 2_000, interval: 50 }).toBe(true);
    const prepared = await preparedOn(bus);
    expect(prepared.has(sql.jobClaim)).toBe(true);
    expect(prepared.has(sql.jobCompleteMany)).toBe(true);
  });
});

// The bus the chaos workers run (`rea run test/chaos/bus.ts`): one transactional handler that
// counts each event in the same transaction as its completion, one plain handler that appends.
import { createBus, defineEvents } from 'rea';
import { z } from 'zod';

const url = process.env.CHAOS_DATABASE_URL!;
const schema = process.env.CHAOS_SCHEMA!;

export const events = defineEvents({ 'chaos.tick': z.object({ seq: z.number().int() }) });

export const bus = createBus({
  database: { postgres: url, poolSize: 4 },
  schema,
  events,
  // Inline delivery on, so the no-loss claim covers it: the append handler runs in relay rounds.
  relay: { inlineMs: 50 },
  worker: { concurrency: 8, leaseMarginMs: 1000 },
  leader: { ttlMs: 3000, renewMs: 1000 },
  rescuer: { intervalMs: 500 },
});

bus.on('chaos.tick', 'counter', async (event, ctx) => {
  await ctx.tx!.query(
    `insert into "${schema}".chaos_counts (event_id, n) values ($1, 1)
     on conflict (event_id) do update set n = chaos_counts.n + 1`,
    [event.id],
  );
}, { transactional: true, timeoutMs: 3000, backoff: () => 200, maxAttempts: 25 });

bus.on('chaos.tick', 'append', async (event, ctx) => {
  await bus.transaction((tx) => tx.query(`insert into "${schema}".chaos_appends (event_id) values ($1)`, [event.id]).then(() => undefined));
  void ctx;
}, { timeoutMs: 3000, backoff: () => 200, maxAttempts: 25 });

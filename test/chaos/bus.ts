// The bus the chaos workers run (`rea run` on its build, test/chaos/.build/bus.js): one
// transactional handler that counts each chaos.tick in the same transaction as its completion, one
// plain handler that appends; chaos.hook events go to the runner's webhook endpoint alone, on
// loopback (allowPrivateNetworks).
import { createBus, defineEvents } from 'rea';
import { z } from 'zod';
import { schema, workerOptions } from './worker-options.js';

export const events = defineEvents({ 'chaos.tick': z.object({ seq: z.number().int() }), 'chaos.hook': z.object({ seq: z.number().int() }) });

// Inline delivery is on (workerOptions): the append handler runs in relay rounds when it can.
export const bus = createBus({ ...workerOptions, events, webhooks: { allowPrivateNetworks: true } });

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

// The second bus of the chaos run (`rea run` on its build, test/chaos/.build/bus-lean.js), on a
// schema of its own: one plain handler and nothing else, so its relay rounds take the lean inline
// path (claim, one update, the handler run inside the round, COMMIT) that figure 1 of the bench
// measures. Its effect is an append through a pool of its own, as a call to another system would
// be: it never waits for rea's connections, so its deliveries finish inside the round. Straight to
// PostgreSQL, not through the runner's proxy: that other system does not fail over with rea's
// database (its pool, with no deadline, would otherwise wait on silent connections for good).
import { createBus, defineEvents } from 'rea';
import pg from 'pg';
import { z } from 'zod';
import { effectsUrl, schema, workerOptions } from './worker-options.js';

export const events = defineEvents({ 'chaos.lean': z.object({ seq: z.number().int() }) });

export const bus = createBus({ ...workerOptions, events });

const effects = new pg.Pool({ connectionString: effectsUrl, max: 4, application_name: 'chaos-effects' });
// A connection the restart or pg_terminate_backend ends must not crash the worker; the handler's
// query fails instead, and the delivery is retried.
effects.on('error', () => {});

bus.on('chaos.lean', 'mark', async (event) => {
  await effects.query(`insert into "${schema}".chaos_marks (event_id) values ($1)`, [event.id]);
}, { timeoutMs: 3000, backoff: () => 200, maxAttempts: 25 });

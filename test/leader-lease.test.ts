// The leader's lease, seen from the process holding it: leading ends when the lease does, even
// while a renewal is still on its way, so two processes never run maintenance at once.
import { expect, it } from 'vitest';
import { z } from 'zod';
import { createBus, defineEvents } from '../src/index.js';
import { freshSchema, postgresTarget, testBus } from './helpers/db.js';
import { counter, deferred } from './helpers/signals.js';

const events = defineEvents({ 'job.requested': z.object({ n: z.number() }) });
const target = postgresTarget;
const test = it.skipIf(!target.available);

test('a leader whose renewal waits for a pool connection past its TTL stops leading before another process takes over', async () => {
  const schema = freshSchema();
  const leader = { ttlMs: 600, renewMs: 100 };
  // Two connections, both held by transactional handlers: the renewal waits for one of them.
  const a = await testBus(target, events, { schema, instanceId: 'a', database: { postgres: (target.database() as { postgres: string }).postgres, poolSize: 2 }, leader });
  const gate = deferred();
  const holding = counter(2);
  a.on('job.requested', 'holds-a-connection', async () => {
    holding.tick();
    await gate.promise;
  }, { transactional: true, timeoutMs: 20_000 });
  const aElected = a.lifecycle.waitFor('leader:elected');
  await a.start();
  await aElected;
  // Everything a logs about leading, with the time it learnt it.
  const aLost = a.lifecycle.waitFor('leader:lost', () => true, 10_000);
  await a.transaction((tx) => a.recordMany(tx, [{ type: 'job.requested', payload: { n: 1 } }, { type: 'job.requested', payload: { n: 2 } }]));
  await holding.done;

  const b = createBus({ database: target.database(), schema, events, instanceId: 'b', leader });
  try {
    const bElected = b.lifecycle.waitFor('leader:elected', () => true, 10_000);
    await b.start();
    await bElected;
    // b holds the lease now, so a's lease has expired: a must not still believe it leads.
    expect(b.isLeader).toBe(true);
    expect(a.isLeader).toBe(false);
    await aLost;
  } finally {
    gate.resolve();
    await b.stop();
  }
});

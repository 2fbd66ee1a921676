import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineEvents } from '../src/index.js';
import { targets, testBus } from './helpers/db.js';

const events = defineEvents({
  'order.created': z.object({ orderNo: z.string(), total: z.number().int() }),
  'order.paid': z.object({ orderNo: z.string() }),
  'user.signed_up': z.object({ email: z.string() }),
});

describe.each(targets)('core on $name', (target) => {
  it.skipIf(!target.available)('a committed event runs each subscribed handler exactly once', async () => {
    const bus = await testBus(target, events);
    const seen: string[] = [];
    bus.on('order.created', 'warehouse', async (e) => {
      seen.push(`warehouse:${e.payload.orderNo}`);
    });
    bus.on('order.created', 'mailer', async (e) => {
      seen.push(`mailer:${e.payload.orderNo}`);
    });
    await bus.start();
    const done = Promise.all([
      bus.lifecycle.waitFor('job:completed', (j) => j.handler === 'warehouse'),
      bus.lifecycle.waitFor('job:completed', (j) => j.handler === 'mailer'),
    ]);
    const id = await bus.transaction(async (tx) => bus.record(tx, 'order.created', { orderNo: 'A1', total: 5 }, { subject: 'A1' }));
    await done;
    expect(seen.sort()).toEqual(['mailer:A1', 'warehouse:A1']);
    const jobs = await bus.jobs.forEvent(id);
    expect(jobs.map((j) => [j.target, j.state, j.attempt]).sort()).toEqual([['mailer', 'completed', 1], ['warehouse', 'completed', 1]]);
  });
});

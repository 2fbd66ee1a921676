// The wake-up NOTIFY that tells other processes about a commit is sent on the LISTEN connection,
// so it never takes (or waits for) a connection of the application's pool.
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { z } from 'zod';
import { defineEvents } from '../src/index.js';
import { freshSchema, PG_URL, postgresTarget, testBus } from './helpers/db.js';

const events = defineEvents({ 'order.created': z.object({ orderNo: z.string() }) });

describe.skipIf(!postgresTarget.available)('wake-up notifications on postgres', () => {
  it('go out while every pool connection is held by the application', async () => {
    const schema = freshSchema();
    const bus = await testBus(postgresTarget, events, {
      schema,
      database: { postgres: PG_URL, poolSize: 1 },
      relay: { enabled: false },
      worker: { enabled: false },
      notifyDebounceMs: 50,
    });
    await bus.start();

    const other = new pg.Client({ connectionString: PG_URL });
    await other.connect();
    onTestFinished(() => other.end());
    await other.query(`LISTEN "rea_${schema}"`);
    const received = new Promise<string>((resolve) => other.on('notification', (m) => resolve(m.payload ?? '')));

    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'A1' }));
    // The commit schedules a NOTIFY 50 ms out; meanwhile the application takes the pool's only connection.
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let holding = false;
    const holder = bus.transaction(async () => {
      holding = true;
      await held;
    });
    try {
      const outcome = await Promise.race([received, new Promise<string>((r) => setTimeout(() => r('not received'), 2000))]);
      expect(holding).toBe(true);
      expect(outcome).toBe('e');
    } finally {
      release();
      await holder;
    }
  });
});
